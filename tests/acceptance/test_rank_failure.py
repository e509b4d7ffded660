"""Rank-failure propagation: when one rank of
a collective job dies mid-job, the rest of the job stops within a bounded time instead of holding
the allocation. What is measured is this cluster's setup (Slurm's KillOnBadExit, the collective
library's error handling), from time stamps every rank leaves on the shared filesystem.
"""

from __future__ import annotations

import pytest

from pytest_gpucluster.plan import jobs


@pytest.mark.quick
@pytest.mark.uses(jobs.RANK_FAILURE)  # measures no speed: may start ahead (plan/jobs.py)
def test_a_dead_rank_ends_the_job(measured, judge):
    job_id, teardown = measured()
    judge.findings(teardown.problems, f"job {job_id}: the rank failure was not injected as planned")
    judge(teardown.measurement(job_id))  # the cluster's setup: of the job's nodes together

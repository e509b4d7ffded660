"""Rank-failure propagation (seed 001, "failure propagation when a rank exits"): when one rank of
a collective job dies mid-job, the rest of the job stops within a bounded time instead of holding
the allocation. What is measured is this cluster's setup (Slurm's KillOnBadExit, the collective
library's error handling), from time stamps every rank leaves on the shared filesystem.
"""

from __future__ import annotations

import pytest

from pytest_gpucluster.errors import LaunchError
from pytest_gpucluster.verdict import Measurement
from pytest_gpucluster.workloads import rank_failure as rf


@pytest.mark.quick
def test_a_dead_rank_ends_the_job(gpucluster, thresholds, judge):
    bound = thresholds["robustness.rank_failure_teardown"].fail_above or 0.0
    nodes, tasks = rf.job_shape(len(gpucluster.nodes))
    gpus = tasks if gpucluster.profile.gpus_are_real and gpucluster.gpus_per_node else 0
    spec = gpucluster.spec("rank-failure", nodes=nodes, tasks_per_node=tasks, gpus_per_node=gpus,
                           timeout_min=rf.job_minutes(bound))  # fmt: skip
    stamps = rf.new_stamp_dir(gpucluster.job_root)
    job = gpucluster.submit(rf.rank_failure, spec, stamp_dir=str(stamps))
    with pytest.raises(LaunchError):  # the victim rank has no result: the launcher must say so
        job.results(lag_s=0.0)  # the victim never writes a result; the survivors wrote theirs before the end
    teardown = rf.teardown_from_stamps(stamps)
    if teardown.ran_from and job.on_ran is not None:  # the job's run time, for the run's timing
        job.process_started = teardown.process_from or job.process_started
        job.on_ran(teardown.ran_from, teardown.ran_to)
    judge.problems(list(teardown.problems), f"job {job.job_id}: the rank failure was not injected as planned")
    judge(Measurement("robustness.rank_failure_teardown", teardown.seconds, "s", where=teardown.where,
                      detail=teardown.detail, job_id=job.job_id))  # fmt: skip

"""Rank-failure propagation: when one rank of
a collective job dies mid-job, the rest of the job stops within a bounded time instead of holding
the allocation. What is measured is this cluster's setup (Slurm's KillOnBadExit, the collective
library's error handling), from time stamps every rank leaves on the shared filesystem.
"""

from __future__ import annotations

import dataclasses

import pytest

from pytest_gpucluster.checks import rank_failure as rf_checks
from pytest_gpucluster.errors import LaunchError
from pytest_gpucluster.plan import jobs
from pytest_gpucluster.verdict import Measurement
from pytest_gpucluster.workloads import rank_failure as rf


def _dead_rank(gpucluster):
    """Once per run: the job in which one rank dies, and the teardown its stamps show."""

    def produce():
        # Without a bound the job still runs (its check then could not judge): give it the shortest limit.
        bound = getattr(gpucluster.thresholds.get("robustness.rank_failure_teardown"), "fail_above", None) or 0.0
        plan = rf_checks.plan(
            len(gpucluster.nodes), gpus_per_node=gpucluster.gpus_per_node, real_gpus=gpucluster.profile.gpus_are_real
        )
        spec = gpucluster.spec(
            "rank-failure",
            nodes=plan.nodes,
            tasks_per_node=plan.tasks_per_node,
            gpus_per_node=plan.gpus_per_node,
            timeout_min=rf_checks.job_minutes(bound),
        )
        stamps = rf.new_stamp_dir(gpucluster.job_root)
        job = gpucluster.submit(rf.rank_failure, spec, stamp_dir=str(stamps), backend=plan.backend)
        with pytest.raises(LaunchError):  # the victim rank has no result: the launcher must say so
            # The victim never writes a result (its node is not lost for it); the survivors wrote theirs.
            job.results(lag_s=0.0, learn_lost=False)
        teardown = rf_checks.teardown_from_stamps(stamps)
        if not any(stamps.glob("rank*.json")) and (why := job.never_started()) is not None:
            never = rf_checks.never_started(job.job_id, why, spec.nodelist)
            teardown = dataclasses.replace(teardown, problems=(never,))
        elif plan.note:
            teardown = dataclasses.replace(teardown, detail=f"{teardown.detail}; {plan.note}")
        if teardown.ran_from and job.on_ran is not None:  # the job's run time, for the run's timing
            job.process_started = teardown.process_from or job.process_started
            job.on_ran(teardown.ran_from, teardown.ran_to)
        return job.job_id, teardown

    return gpucluster.once(("rank-failure",), produce)


@pytest.fixture
def dead_rank(gpucluster):
    """(job id, teardown) of the run's rank-failure job."""
    return _dead_rank(gpucluster)


@pytest.mark.quick
@pytest.mark.uses(jobs.RANK_FAILURE, start=_dead_rank)  # measures no speed: may start ahead (plan/jobs.py)
def test_a_dead_rank_ends_the_job(dead_rank, judge):
    job_id, teardown = dead_rank
    judge.problems(list(teardown.problems), f"job {job_id}: the rank failure was not injected as planned")
    judge(
        Measurement(
            "robustness.rank_failure_teardown",
            teardown.seconds,
            "s",
            where=teardown.where,
            detail=teardown.detail,
            job_id=job_id,
        )
    )

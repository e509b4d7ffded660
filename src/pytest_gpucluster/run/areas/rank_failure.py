"""Rank-failure propagation: one collective job in which one rank dies, and the teardown the
stamps every rank leaves on the shared filesystem show."""

from __future__ import annotations

import dataclasses

from pytest_gpucluster.checks import rank_failure as rf_checks
from pytest_gpucluster.checks.rank_failure import Teardown
from pytest_gpucluster.errors import ClusterFault, LaunchError
from pytest_gpucluster.outcomes import failed
from pytest_gpucluster.plan import jobs
from pytest_gpucluster.run.context import JobContext
from pytest_gpucluster.run.produce import produces, spec_of
from pytest_gpucluster.workloads import rank_failure as rf


@produces(jobs.RANK_FAILURE)
def dead_rank(ctx: JobContext) -> tuple[str, Teardown]:
    """(job id, teardown) of the run's rank-failure job, once per run. Not light when a test
    produces it: it holds GPUs, so it waits for the jobs started ahead (its own early start is
    light)."""
    return ctx.once(jobs.RANK_FAILURE.key, lambda: _dead_rank(ctx))


def _dead_rank(ctx: JobContext) -> tuple[str, Teardown]:
    # Without a bound the job still runs (its check then could not judge): give it the shortest limit.
    bound = getattr(ctx.thresholds.get("robustness.rank_failure_teardown"), "fail_above", None) or 0.0
    plan = rf_checks.plan(len(ctx.live_nodes), gpus_per_node=ctx.gpus_per_node, real_gpus=ctx.profile.gpus_are_real)
    # Two nodes where two are live, so that the failure crosses the network; else two ranks on one.
    request = jobs.RANK_FAILURE if plan.nodes == 2 else jobs.RANK_FAILURE_ONE_NODE
    spec = spec_of(ctx, request, name=jobs.RANK_FAILURE.key, timeout_min=rf_checks.job_minutes(bound))
    stamps = rf.new_stamp_dir(ctx.job_root)
    assert request.workload is not None
    job = ctx.submit(request.workload, spec, stamp_dir=str(stamps), backend=plan.backend)
    try:
        # The victim never writes a result (its node is not lost for it); the survivors wrote theirs.
        job.results(lag_s=0.0, learn_lost=False)
    except ClusterFault:
        raise  # the configuration, the environment, other work: not judged, no node's failure
    except LaunchError:
        pass  # the victim rank has no result: the launcher must say so
    else:
        failed(f"job {job.job_id}: every rank returned a result; the launcher did not see the victim rank die")
    teardown = rf_checks.teardown_from_stamps(stamps, ran_on=job.nodelist)
    if not any(stamps.glob("rank*.json")) and (why := job.never_started()) is not None:
        never = rf_checks.never_started(job.job_id, why, spec.nodelist)
        teardown = dataclasses.replace(teardown, problems=(never,))
    elif plan.note:
        teardown = dataclasses.replace(teardown, detail=f"{teardown.detail}; {plan.note}")
    if teardown.ran_from and job.on_ran is not None:  # the job's run time, for the run's timing
        job.process_started = teardown.process_from or job.process_started
        job.on_ran(teardown.ran_from, teardown.ran_to)
    return job.job_id, teardown

"""Training stability: a long DDP run on every node (the profile's ``[training] stability_steps``,
120 by default: the reference training validation runs 100+ iterations) must train correctly and
at an even pace.

Correct: every rank's loss finite at every step, and falling. Even: per node, the coefficient of
variation of the step times and the slowest step over the median one, against thresholds.toml
(checks/stability.py). Marked ``slow``: it is minutes on a GPU-sized model. It needs no GPU: on
nodes without one the tiny CPU model stands in (workloads/training.py: plan_training), as on the
ci profile.
"""

from __future__ import annotations

import pytest

from pytest_gpucluster.checks import stability
from pytest_gpucluster.errors import ClusterFault, GpuClusterError
from pytest_gpucluster.plan import jobs
from pytest_gpucluster.workloads.training import plan_training, stability_config, summarise, train

MODE = "ddp"

pytestmark = [pytest.mark.slow, pytest.mark.uses(jobs.TRAIN_STABILITY)]


def _plan(gpucluster):
    plan = plan_training(
        gpucluster.profile.training, gpus_per_node=gpucluster.gpus_per_node, real_gpus=gpucluster.profile.gpus_are_real
    )
    return plan, stability_config(plan.config)


def _long_runs(gpucluster):
    """One job per node, all submitted at once: node → (RunStats of every rank, job id) or the
    node's error."""

    def produce():
        plan, config = _plan(gpucluster)
        submitted, out = {}, {}
        for n in gpucluster.nodes:
            spec = gpucluster.spec(
                f"train-stability-{n}",
                nodelist=(n,),
                tasks_per_node=plan.ranks_per_node,
                gpus_per_node=plan.gpus_per_node,
                timeout_min=plan.timeout_min,
            )
            try:
                submitted[n] = gpucluster.submit(train, spec, config=config, modes=(MODE,), timeout_s=plan.timeout_s)
            except GpuClusterError as exc:  # a node lost earlier: that node's verdict only
                out[n] = exc
        for n, job in submitted.items():
            try:
                results = job.results()
            except GpuClusterError as exc:
                out[n] = exc
                continue
            out[n] = ([r.value[0] for r in results], results[0].job_id)
        return out

    return gpucluster.once("train.stability", produce)


@pytest.fixture
def long_run(gpucluster, node):
    """``node``'s long run: (RunStats of every rank, job id)."""
    got = _long_runs(gpucluster).get(node)
    if isinstance(got, ClusterFault):
        raise got  # the controller or the shared filesystem, not the node: not judged
    if isinstance(got, Exception) or got is None:
        pytest.fail(f"{node}: the long training job failed: {got}", pytrace=False)
    return got


def test_loss_falls_and_stays_finite_over_a_long_run(gpucluster, judge, record, node, long_run):
    runs, job = long_run
    _, config = _plan(gpucluster)
    summary = summarise(runs, config)
    record(
        "series",
        name="train.stability.loss",
        where=node,
        x_label="step",
        y_label="loss",
        points=[[i, v] for i, v in enumerate(summary.losses)],
    )
    judge.problems(
        list(summary.problems), f"job {job}: {len(summary.losses)} steps of {MODE} training on {node} went wrong"
    )


def test_step_time_is_steady_over_a_long_run(gpucluster, judge, record, node, long_run):
    runs, job = long_run
    plan, _ = _plan(gpucluster)
    times = stability.node_step_times(runs)
    judge.problems(stability.time_problems(times), f"job {job}: step times of {node} cannot be judged")
    record(
        "series",
        name="train.stability.step_time",
        where=node,
        x_label="step",
        y_label="s",
        points=[[i, t] for i, t in enumerate(times[node])],
    )
    ranks = f"{MODE} on {len(runs)} rank(s)" + (" (tiny CPU model: no GPUs)" if plan.note else "")
    judge.all(stability.stability(node, times[node]).measurements(ranks, job))

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
from pytest_gpucluster.checks import training as training_checks
from pytest_gpucluster.errors import ClusterFault
from pytest_gpucluster.plan import jobs
from pytest_gpucluster.run.areas.training import STABILITY_MODE as MODE
from pytest_gpucluster.workloads.training import summarise

pytestmark = [pytest.mark.slow, pytest.mark.uses(jobs.TRAIN_STABILITY)]


@pytest.fixture
def long_runs(measured):
    """Every node's long run (``run.areas.training.LongRuns``): by node, the config, the plan's note."""
    return measured()


@pytest.fixture
def long_run(long_runs, node):
    """``node``'s long run: (RunStats of every rank, job id)."""
    got = long_runs.by_node.get(node)
    if isinstance(got, ClusterFault):
        raise got  # the controller or the shared filesystem, not the node: not judged
    if isinstance(got, Exception) or got is None:
        pytest.fail(f"{node}: the long training job failed: {got}", pytrace=False)
    return got


def test_loss_falls_and_stays_finite_over_a_long_run(long_runs, judge, record, node, long_run):
    runs, job = long_run
    summary = summarise(runs, long_runs.config)
    record(
        "series",
        name="train.stability.loss",
        where=node,
        x_label="step",
        y_label="loss",
        points=[[i, v] for i, v in enumerate(summary.losses)],
    )
    judge.findings(
        training_checks.correctness_findings(summary),
        f"job {job}: {len(summary.losses)} steps of {MODE} training on {node} went wrong",
    )


def test_step_time_is_steady_over_a_long_run(long_runs, judge, record, node, long_run):
    runs, job = long_run
    times = stability.node_step_times(runs)
    judge.findings(stability.time_findings(times), f"job {job}: step times of {node} cannot be judged")
    record(
        "series",
        name="train.stability.step_time",
        where=node,
        x_label="step",
        y_label="s",
        points=[[i, t] for i, t in enumerate(times[node])],
    )
    ranks = f"{MODE} on {len(runs)} rank(s)" + (" (tiny CPU model: no GPUs)" if long_runs.note else "")
    judge.all(stability.stability(node, times[node]).measurements(ranks, job))

"""Task placement: ranks, hosts and local ids are exactly the layout asked for."""

from __future__ import annotations

import pytest

from pytest_gpucluster.checks.placement import placement_problems
from pytest_gpucluster.plan import jobs
from pytest_gpucluster.workloads.placement import report_placement


def _placed(gpucluster, nodes, tasks_per_node):
    """One job of ``nodes`` × ``tasks_per_node`` tasks, asking for no GPU: where each task ran."""
    spec = gpucluster.spec("placement", nodes=nodes, tasks_per_node=tasks_per_node, gpus_per_node=0)
    return gpucluster.once(
        ("placement", nodes, tasks_per_node), lambda: gpucluster.run(report_placement, spec), light=True
    )


pytestmark = pytest.mark.uses(jobs.PLACEMENT, start=_placed)


@pytest.fixture
def placed(gpucluster, nodes, tasks_per_node):
    return _placed(gpucluster, nodes, tasks_per_node)


@pytest.mark.quick
@pytest.mark.parametrize(
    ("nodes", "tasks_per_node"),
    [
        pytest.param(1, 1, id="1node-1task"),
        pytest.param(1, 2, id="1node-2tasks"),
        pytest.param(2, 1, id="2nodes-1task-each", marks=pytest.mark.across_nodes),
    ],
)
def test_task_placement(placed, judge, nodes, tasks_per_node):
    problems = placement_problems([r.value for r in placed], nodes, tasks_per_node)
    judge.problems(problems, f"job {placed[0].job_id}: tasks are not where Slurm was asked to put them")

"""Task placement: ranks, hosts and local ids are exactly the layout asked for."""

from __future__ import annotations

from typing import NamedTuple

import pytest

from pytest_gpucluster.checks.placement import placement_problems
from pytest_gpucluster.launch import TaskResult
from pytest_gpucluster.plan import jobs
from pytest_gpucluster.workloads.placement import Placement, report_placement

# The layout the training and NCCL jobs use: every tested node, one task per GPU.
EVERY_NODE, PER_GPU = "every", "per-gpu"


class Placed(NamedTuple):
    """The layout a placement job asked for and where each of its tasks ran."""

    nodes: int
    tasks_per_node: int
    results: list[TaskResult[Placement]]


def _placed(gpucluster, nodes, tasks_per_node):
    """One job of ``nodes`` × ``tasks_per_node`` tasks, asking for no GPU: where each task ran.
    ``EVERY_NODE`` is every tested node (less those lost), ``PER_GPU`` a task per GPU the nodes
    have, at least one."""

    def run() -> Placed:
        every = nodes == EVERY_NODE
        tasks = max(1, gpucluster.gpus_per_node) if tasks_per_node == PER_GPU else tasks_per_node
        spec = gpucluster.spec(
            "placement-every-node" if every else "placement",
            all_nodes=every,
            nodes=None if every else nodes,
            tasks_per_node=tasks,
            gpus_per_node=0,
        )
        return Placed(spec.nodes, tasks, gpucluster.run(report_placement, spec))

    return gpucluster.once(("placement", nodes, tasks_per_node), run, light=nodes != EVERY_NODE)


# The small layouts start ahead, beside the other light jobs; the every-node layout takes its
# nodes' CPUs and runs when its test does.
SMALL = pytest.mark.uses(jobs.PLACEMENT, start=_placed)


@pytest.fixture
def placed(gpucluster, nodes, tasks_per_node):
    return _placed(gpucluster, nodes, tasks_per_node)


@pytest.mark.quick
@pytest.mark.parametrize(
    ("nodes", "tasks_per_node"),
    [
        pytest.param(1, 1, id="1node-1task", marks=SMALL),
        pytest.param(1, 2, id="1node-2tasks", marks=SMALL),
        pytest.param(2, 1, id="2nodes-1task-each", marks=[SMALL, pytest.mark.across_nodes]),
        pytest.param(
            EVERY_NODE, PER_GPU, id="every-node-a-task-per-gpu", marks=pytest.mark.uses(jobs.PLACEMENT_EVERY_NODE)
        ),
    ],
)
def test_task_placement(placed, judge):
    problems = placement_problems([r.value for r in placed.results], placed.nodes, placed.tasks_per_node)
    job = placed.results[0].job_id if placed.results else "?"
    layout = f"{placed.nodes} nodes × {placed.tasks_per_node} tasks"
    judge.problems(problems, f"job {job} ({layout}): tasks are not where Slurm was asked to put them")

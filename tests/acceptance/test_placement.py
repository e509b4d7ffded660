"""Task placement: ranks, hosts and local ids are exactly the layout asked for."""

from __future__ import annotations

import pytest

from pytest_gpucluster.checks.placement import placement_findings
from pytest_gpucluster.plan import JobRequest, jobs


def layout(request: JobRequest, id: str, *marks: pytest.MarkDecorator) -> object:
    """A parameter of the check: the placement job it reads, declared."""
    return pytest.param(request, id=id, marks=[pytest.mark.uses(request), *marks])


# The small layouts are light and start ahead, beside the other light jobs; the every-node layout
# takes its nodes' CPUs and runs when its test does.
@pytest.mark.quick
@pytest.mark.parametrize(
    "placement",
    [
        layout(jobs.PLACEMENT_ONE_TASK, "1node-1task"),
        layout(jobs.PLACEMENT_TWO_TASKS, "1node-2tasks"),
        layout(jobs.PLACEMENT_TWO_NODES, "2nodes-1task-each", pytest.mark.across_nodes),
        layout(jobs.PLACEMENT_EVERY_NODE, "every-node-a-task-per-gpu"),
    ],
)
def test_task_placement(measured, judge, placement):
    placed = measured(placement)
    on = [r.node for r in placed.results]  # the job's nodes: the layout is Slurm's, named on them together
    found = placement_findings([r.value for r in placed.results], placed.nodes, placed.tasks_per_node, on=on)
    job = placed.results[0].job_id if placed.results else "?"
    said = f"{placed.nodes} nodes × {placed.tasks_per_node} tasks"
    judge.findings(found, f"job {job} ({said}): tasks are not where Slurm was asked to put them")

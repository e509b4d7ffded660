"""Task placement: ranks, hosts and local ids are exactly the layout asked for."""

from __future__ import annotations

import pytest

from pytest_gpucluster.checks.placement import placement_findings
from pytest_gpucluster.plan import jobs
from pytest_gpucluster.run.areas.placement import EVERY_NODE, PER_GPU

# The small layouts start ahead, beside the other light jobs; the every-node layout takes its
# nodes' CPUs and runs when its test does.
SMALL = pytest.mark.uses(jobs.PLACEMENT)


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
def test_task_placement(measured, judge, nodes, tasks_per_node):
    placed = measured()
    on = [r.node for r in placed.results]  # the job's nodes: the layout is Slurm's, named on them together
    found = placement_findings([r.value for r in placed.results], placed.nodes, placed.tasks_per_node, on=on)
    job = placed.results[0].job_id if placed.results else "?"
    layout = f"{placed.nodes} nodes × {placed.tasks_per_node} tasks"
    judge.findings(found, f"job {job} ({layout}): tasks are not where Slurm was asked to put them")

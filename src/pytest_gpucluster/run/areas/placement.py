"""Task placement: one job of the layout a test asks for, asking for no GPU."""

from __future__ import annotations

from typing import NamedTuple

from pytest_gpucluster.launch import TaskResult
from pytest_gpucluster.plan import jobs
from pytest_gpucluster.run.context import JobContext
from pytest_gpucluster.run.produce import produces, spec_of
from pytest_gpucluster.workloads.placement import Placement

EVERY_NODE, PER_GPU = "every", "per-gpu"  # the layout the training and NCCL jobs use


class Placed(NamedTuple):
    """The layout a placement job asked for and where each of its tasks ran."""

    nodes: int
    tasks_per_node: int
    results: list[TaskResult[Placement]]


@produces(jobs.PLACEMENT)
def placed(ctx: JobContext, nodes: int | str, tasks_per_node: int | str) -> Placed:
    """One job of ``nodes`` × ``tasks_per_node`` tasks, asking for no GPU: where each task ran.
    ``EVERY_NODE`` is every tested node (less those lost), ``PER_GPU`` a task per GPU the nodes
    have, at least one."""
    every = nodes == EVERY_NODE
    request = jobs.PLACEMENT_EVERY_NODE if every else jobs.PLACEMENT
    tasks = max(1, ctx.gpus_per_node) if tasks_per_node == PER_GPU else int(tasks_per_node)

    def run() -> Placed:
        spec = spec_of(ctx, request, tasks_per_node=tasks, nodes=None if every else int(nodes))
        assert request.workload is not None
        return Placed(spec.nodes, tasks, ctx.run(request.workload, spec))

    return ctx.once(("placement", nodes, tasks_per_node), run, light=not every)


produces(jobs.PLACEMENT_EVERY_NODE)(placed)

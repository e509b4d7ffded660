"""Task placement: one job per layout the check asks for (``jobs.PLACEMENT_*``: one task on one
node, two tasks on one node, one task on each of two nodes, a task per GPU on every node), each
asking for no GPU; the layout is its request's declared shape."""

from __future__ import annotations

from typing import NamedTuple

from pytest_gpucluster.launch import TaskResult
from pytest_gpucluster.plan import JobRequest, jobs
from pytest_gpucluster.run.context import JobContext
from pytest_gpucluster.run.produce import produces, spec_of
from pytest_gpucluster.workloads.placement import Placement


class Placed(NamedTuple):
    """The layout a placement job asked for and where each of its tasks ran."""

    nodes: int
    tasks_per_node: int
    results: list[TaskResult[Placement]]


def _placed(ctx: JobContext, request: JobRequest) -> Placed:
    """``request``'s job, once per run: where each of its tasks ran."""

    def run() -> Placed:
        spec = spec_of(ctx, request)
        assert request.workload is not None
        return Placed(spec.nodes, spec.tasks_per_node, ctx.run(request.workload, spec))

    return ctx.once(request.key, run, light=request.light)


@produces(jobs.PLACEMENT_ONE_TASK)
def one_task(ctx: JobContext) -> Placed:
    """One task on one node."""
    return _placed(ctx, jobs.PLACEMENT_ONE_TASK)


@produces(jobs.PLACEMENT_TWO_TASKS)
def two_tasks(ctx: JobContext) -> Placed:
    """Two tasks on one node."""
    return _placed(ctx, jobs.PLACEMENT_TWO_TASKS)


@produces(jobs.PLACEMENT_TWO_NODES)
def two_nodes(ctx: JobContext) -> Placed:
    """One task on each of two nodes."""
    return _placed(ctx, jobs.PLACEMENT_TWO_NODES)


@produces(jobs.PLACEMENT_EVERY_NODE)
def every_node(ctx: JobContext) -> Placed:
    """A task per GPU on every tested node (less those lost)."""
    return _placed(ctx, jobs.PLACEMENT_EVERY_NODE)

"""Fabric error counters: a snapshot of every node's InfiniBand and NVLink counters before the
first workload (started ahead) and one after every other job (its tests run last)."""

from __future__ import annotations

from pytest_gpucluster.plan import JobRequest, jobs
from pytest_gpucluster.run.context import JobContext
from pytest_gpucluster.run.produce import produces, run_declared
from pytest_gpucluster.workloads.fabric_counters import FabricSnapshot

Snapshots = tuple[dict[str, FabricSnapshot], str]  # node → snapshot, and the job id


def _snapshot(ctx: JobContext, request: JobRequest) -> Snapshots:
    """One task per node, holding the node's GPUs."""
    results = run_declared(ctx, request)
    return {r.value.node: r.value for r in results}, results[0].job_id


@produces(jobs.FABRIC_BEFORE)
def before(ctx: JobContext) -> Snapshots:
    return ctx.once(jobs.FABRIC_BEFORE.key, lambda: _snapshot(ctx, jobs.FABRIC_BEFORE), light=True)


@produces(jobs.FABRIC_AFTER)
def after(ctx: JobContext) -> Snapshots:
    # Not light: it waits until every job started ahead has ended.
    return ctx.once(jobs.FABRIC_AFTER.key, lambda: _snapshot(ctx, jobs.FABRIC_AFTER))

"""Fabric error counters: a snapshot of every node's InfiniBand and NVLink counters before the
first workload (started ahead) and one after every other job (its tests run last). Where the
run reads the kernel log for Xid lines too, the after job reads it in the same task."""

from __future__ import annotations

from pytest_gpucluster.plan import JobRequest, jobs
from pytest_gpucluster.run.context import JobContext
from pytest_gpucluster.run.produce import answered, produces, run_declared, spec_of
from pytest_gpucluster.workloads import fabric_counters, xid
from pytest_gpucluster.workloads.fabric_counters import FabricSnapshot

Snapshots = tuple[dict[str, FabricSnapshot], str]  # node → snapshot, and the job id
KernelLogs = tuple[dict[str, xid.KernelLog], str]  # node → its kernel log, and the job id


def _snapshot(ctx: JobContext, request: JobRequest) -> Snapshots:
    """One task per node, holding the node's GPUs; a node lost under it leaves the others'."""
    results = answered(lambda: run_declared(ctx, request))
    return {r.value.node: r.value for r in results}, results[0].job_id


@produces(jobs.FABRIC_BEFORE)
def before(ctx: JobContext) -> Snapshots:
    return ctx.once(jobs.FABRIC_BEFORE.key, lambda: _snapshot(ctx, jobs.FABRIC_BEFORE), light=True)


def _after_with_kernel_logs(ctx: JobContext) -> tuple[Snapshots, KernelLogs]:
    """The after snapshot and, in the same task, every node's kernel log (the Xid check rides
    along)."""
    assert jobs.FABRIC_AFTER.args is not None
    spec = spec_of(ctx, jobs.FABRIC_AFTER)
    args = jobs.FABRIC_AFTER.args(ctx.profile, ctx.gpus_per_node)
    results = answered(lambda: ctx.run(fabric_counters.snapshot_and_kernel_log, spec, **args))
    job_id = results[0].job_id
    return (
        ({r.value.fabric.node: r.value.fabric for r in results}, job_id),
        ({r.value.kernel_log.node: r.value.kernel_log for r in results}, job_id),
    )


def kernel_log_rides_along(ctx: JobContext) -> bool:
    """Whether the plan reads the kernel log in the fabric's after job."""
    return ctx.plan.rides_in(jobs.XID_LOG.key) == jobs.FABRIC_AFTER.key


def _after(ctx: JobContext) -> tuple[Snapshots, KernelLogs | None]:
    # Not light: it waits until every job started ahead has ended.
    def produce() -> tuple[Snapshots, KernelLogs | None]:
        if kernel_log_rides_along(ctx):
            return _after_with_kernel_logs(ctx)
        return _snapshot(ctx, jobs.FABRIC_AFTER), None

    return ctx.once(jobs.FABRIC_AFTER.key, produce)


@produces(jobs.FABRIC_AFTER)
def after(ctx: JobContext) -> Snapshots:
    return _after(ctx)[0]


def kernel_logs(ctx: JobContext) -> KernelLogs | None:
    """Every node's kernel log from the fabric's after job, where it rides along (None where
    it does not); raises the job's failure."""
    return _after(ctx)[1]

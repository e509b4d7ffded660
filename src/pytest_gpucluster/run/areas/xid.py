"""Xid errors: after every other job, one task per node reads the node's kernel log: in the
fabric's after job where the run has it, else in a GPU-less job of its own."""

from __future__ import annotations

import contextlib

from pytest_gpucluster.errors import GpuClusterError
from pytest_gpucluster.plan import jobs
from pytest_gpucluster.run.areas import fabric
from pytest_gpucluster.run.areas.fabric import KernelLogs
from pytest_gpucluster.run.context import JobContext
from pytest_gpucluster.run.produce import answered, produces, run_declared


@produces(jobs.XID_LOG)
def kernel_logs(ctx: JobContext) -> KernelLogs:
    """Every node's kernel log, once per run: from the fabric's after job where it rides there
    (and that job ran), else from a job of its own. A node lost during the job leaves the others'
    logs: the lost ones are judged on their NVML watches alone."""
    if fabric.kernel_log_rides_along(ctx):
        with contextlib.suppress(GpuClusterError):  # read again on its own below
            shared = fabric.kernel_logs(ctx)
            if shared is not None:
                return shared

    def produce() -> KernelLogs:
        results = answered(lambda: run_declared(ctx, jobs.XID_LOG))
        return {r.value.node: r.value for r in results}, results[0].job_id

    return ctx.once(jobs.XID_LOG.key, produce)

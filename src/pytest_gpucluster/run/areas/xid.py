"""Xid errors: after every other job, one GPU-less task per node reads the node's kernel log."""

from __future__ import annotations

from typing import cast

from pytest_gpucluster.errors import NodeLostError
from pytest_gpucluster.launch import TaskResult
from pytest_gpucluster.plan import jobs
from pytest_gpucluster.run.context import JobContext
from pytest_gpucluster.run.produce import produces, run_declared
from pytest_gpucluster.workloads.xid import KernelLog

KernelLogs = tuple[dict[str, KernelLog], str]  # node → its kernel log, and the job id


@produces(jobs.XID_LOG)
def kernel_logs(ctx: JobContext) -> KernelLogs:
    """Every node's kernel log, once per run. A node lost during the job leaves the others'
    logs: the lost ones are judged on their NVML watches alone."""

    def produce() -> KernelLogs:
        try:
            results = run_declared(ctx, jobs.XID_LOG)
        except NodeLostError as exc:
            if not exc.answered:
                raise
            results = cast(list[TaskResult[KernelLog]], exc.answered)
        return {r.value.node: r.value for r in results}, results[0].job_id

    return ctx.once(jobs.XID_LOG.key, produce)

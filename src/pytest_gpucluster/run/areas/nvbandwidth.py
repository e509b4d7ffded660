"""NVIDIA nvbandwidth: one job on every node at once, holding its GPUs, for the whole run; none
is submitted when the profile names no path and the node probe found nvbandwidth on no node's
PATH."""

from __future__ import annotations

from typing import Any

from pytest_gpucluster.checks.nvbandwidth import NodeCopies, node_copies
from pytest_gpucluster.plan import jobs
from pytest_gpucluster.run.areas import probe
from pytest_gpucluster.run.context import JobContext
from pytest_gpucluster.run.produce import produces, run_declared
from pytest_gpucluster.workloads.nvbandwidth import NvbandwidthRun

Copies = tuple[dict[str, tuple[NvbandwidthRun, NodeCopies | None]], Any]  # node → (run, copies), job id


@produces(jobs.NVBANDWIDTH)
def copies(ctx: JobContext) -> Copies:
    """node → (NvbandwidthRun, NodeCopies or None where it is not installed) and the job id."""
    p = ctx.profile
    if p.nvbandwidth_path is None and probe.absent_everywhere(ctx, "nvbandwidth"):
        why = "not on PATH (the node probe's reading)"
        return {n: (NvbandwidthRun(n, False, why), None) for n in ctx.live_nodes}, None

    def produce() -> Copies:
        results = run_declared(ctx, jobs.NVBANDWIDTH, timeout_min=p.nvbandwidth_timeout_s // 60 + 5)
        runs = {r.value.node: r.value for r in results if r.value}
        read = {n: (run, node_copies(run) if run.found else None) for n, run in runs.items()}
        return read, results[0].job_id

    return ctx.once(jobs.NVBANDWIDTH.key, produce)

"""NVIDIA DCGM diagnostics: ``dcgmi diag -r <profile.dcgm_level>`` in one exclusive job on every
node; none is submitted when the node probe found dcgmi on no node."""

from __future__ import annotations

from pytest_gpucluster.checks.dcgm import job_minutes
from pytest_gpucluster.errors import GpuClusterError
from pytest_gpucluster.plan import jobs
from pytest_gpucluster.run.areas import probe
from pytest_gpucluster.run.context import JobContext
from pytest_gpucluster.run.produce import produces, run_declared
from pytest_gpucluster.workloads.dcgm import DiagRun


@produces(jobs.DCGM)
def diag_runs(ctx: JobContext) -> dict[str, DiagRun]:
    """node → DiagRun, from one exclusive job on every node for the whole run."""
    level = ctx.profile.dcgm_level

    def produce() -> dict[str, DiagRun]:
        results = run_declared(ctx, jobs.DCGM, timeout_min=job_minutes(level))
        return {r.value.node: r.value for r in results if r.value}

    try:
        where = probe.readings(ctx, "dcgmi")
    except GpuClusterError:
        where = {}  # the probe job could not run: the diagnostic job finds out for itself
    if where and set(where) >= set(ctx.live_nodes) and all(path is None for path in where.values()):
        return {node: DiagRun(node=node, found=False, level=level) for node in where}
    return ctx.once("dcgm", produce)

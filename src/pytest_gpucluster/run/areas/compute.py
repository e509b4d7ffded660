"""Per-GPU compute and memory: every GPU's GEMM and device-copy ceilings (riding first in the
run's intra-node NCCL job where the plan says so, else a job of their own) and the burn under a
GEMM load, each one job over every node with a task per GPU. Sizes come from the profile's
``[compute]`` table; on nodes without GPUs CPU ranks stand in (``workloads.compute.plan_compute``).
"""

from __future__ import annotations

from typing import Any, NamedTuple

from pytest_gpucluster.plan import JobRequest, jobs
from pytest_gpucluster.run.areas import nccl
from pytest_gpucluster.run.context import JobContext
from pytest_gpucluster.run.produce import produces, spec_of
from pytest_gpucluster.workloads.compute import ComputePlan, by_node, plan_compute


class Computed(NamedTuple):
    """node → its GPUs' results (GpuCeiling or GpuBurn), the job id and the plan it ran by."""

    nodes: dict[str, list[Any]]
    job_id: str
    plan: ComputePlan


def _all_gpus(ctx: JobContext, request: JobRequest, name: str) -> Computed:
    """One job, one task per GPU on every node; results grouped by node."""

    def produce() -> Computed:
        plan = plan_compute(ctx.profile.compute, gpus_per_node=ctx.gpus_per_node, real_gpus=ctx.profile.gpus_are_real)
        spec = spec_of(ctx, request, name=name)  # the compute plan's ranks and GPUs (``jobs.compute_ranks``)
        assert request.workload is not None
        results = ctx.run(request.workload, spec, config=plan.config)
        return Computed(by_node([r.value for r in results]), results[0].job_id, plan)

    return ctx.once(f"compute.{name}", produce)


@produces(jobs.CEILINGS)
def ceilings(ctx: JobContext) -> Computed:
    """Every GPU's ceilings: from the intra-node NCCL job, ahead of its sweeps, when they ride in
    it; else from a job of their own."""
    plan = nccl.ceilings_ride_along(ctx)
    if plan is not None:
        shared = nccl.intra_node_job(ctx)
        return Computed(by_node(shared.ceilings or []), shared.job_id, plan)
    return _all_gpus(ctx, jobs.CEILINGS, "ceilings")


@produces(jobs.BURN)
def burn(ctx: JobContext) -> Computed:
    """Every GPU under a GEMM load for ``[compute] burn_s``, its clocks and temperature sampled."""
    return _all_gpus(ctx, jobs.BURN, "burn")

"""Silent data corruption: one job on every node, a task per GPU (CPU ranks at ``sdc.TINY`` on
nodes without GPUs), all computing the same seeded chain of GEMMs; where the chain is small
enough, the login node computes it in float64 as well."""

from __future__ import annotations

from typing import NamedTuple

from pytest_gpucluster.plan import jobs
from pytest_gpucluster.run.context import JobContext
from pytest_gpucluster.run.produce import produces, spec_of
from pytest_gpucluster.workloads import sdc
from pytest_gpucluster.workloads.compute import CPU_RANKS_PER_NODE
from pytest_gpucluster.workloads.sdc import SdcConfig, SdcResult


class Chains(NamedTuple):
    """Every device's result, the job id, the float64 reference or None, and the plan's note."""

    results: list[SdcResult]
    job_id: str
    reference: SdcResult | None
    note: str


def _plan(ctx: JobContext) -> tuple[SdcConfig, str]:
    """(config, note): the profile's chain on GPUs, ``TINY`` on the CPU ranks that stand in where
    the GPUs are not real (the job's shape: ``jobs.SDC``)."""
    if ctx.profile.gpus_are_real and ctx.gpus_per_node > 0:
        return ctx.profile.sdc, ""
    note = f"no GPUs: {CPU_RANKS_PER_NODE} CPU ranks per node run the chain at n={sdc.TINY.n}, chain={sdc.TINY.chain}"
    return sdc.TINY, note


def _wants_reference(config: SdcConfig) -> bool:
    """A float64 reference on the login node only for chains no larger than ``TINY``'s."""
    return config.n**3 * config.chain <= sdc.TINY.n**3 * sdc.TINY.chain


@produces(jobs.SDC)
def chains(ctx: JobContext) -> Chains:
    """The run's SDC job, once per run."""

    def produce() -> Chains:
        config, note = _plan(ctx)
        assert jobs.SDC.workload is not None
        spec = spec_of(ctx, jobs.SDC)
        results = ctx.run(jobs.SDC.workload, spec, config=config)
        reference = sdc.reference(config) if _wants_reference(config) else None
        return Chains([r.value for r in results], results[0].job_id, reference, note)

    return ctx.once(jobs.SDC.key, produce)

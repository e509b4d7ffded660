"""Shared filesystem: one GPU-less job on every node, in a fresh private directory the login node
prepares under the profile's ``shared_fs`` and removes afterwards."""

from __future__ import annotations

from typing import NamedTuple

from pytest_gpucluster.errors import GpuClusterError
from pytest_gpucluster.plan import jobs
from pytest_gpucluster.run.context import JobContext
from pytest_gpucluster.run.produce import produces, spec_of
from pytest_gpucluster.workloads import sharedfs
from pytest_gpucluster.workloads.sharedfs import NodeReport, Prepared


class Shared(NamedTuple):
    """The prepared directory, one report per node, and the job id."""

    prepared: Prepared
    reports: list[NodeReport]
    job_id: str


@produces(jobs.SHAREDFS)
def shared(ctx: JobContext) -> Shared:
    """The run's shared-filesystem job, once per run: on the profile's ``shared_fs``, in this
    user's folder there (``JobContext.area``); locally (one node) in the run's own temporary
    folder. A Slurm profile without ``shared_fs`` has no such job (its checks skip before they
    ask; an early start ends here)."""
    root = ctx.profile.shared_fs
    if root is None and ctx.profile.executor == "slurm":
        raise GpuClusterError(f"profile {ctx.profile.name!r} sets no shared_fs: no shared-filesystem job")
    where = root or str(ctx.job_root)

    def produce() -> Shared:
        within = str(ctx.area.relative_to(ctx.shared_root)) if root else ""
        prepared = sharedfs.prepare(where, within=within)
        try:
            assert jobs.SHAREDFS.workload is not None
            results = ctx.run(
                jobs.SHAREDFS.workload,
                spec_of(ctx, jobs.SHAREDFS),
                root_template=where,
                name=prepared.name,
                token=prepared.token,
            )
        finally:
            sharedfs.cleanup(prepared)
        return Shared(prepared, [r.value for r in results], results[0].job_id)

    return ctx.once(jobs.SHAREDFS.key, produce, light=jobs.SHAREDFS.light)

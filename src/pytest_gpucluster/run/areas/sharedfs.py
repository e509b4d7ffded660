"""Shared filesystem: one GPU-less job on every node, in a fresh private directory the login node
prepares under the profile's ``shared_fs`` and removes afterwards."""

from __future__ import annotations

from typing import NamedTuple

from pytest_gpucluster.errors import GpuClusterError, NodeLostError
from pytest_gpucluster.launch import TaskResult
from pytest_gpucluster.plan import jobs
from pytest_gpucluster.run.context import JobContext
from pytest_gpucluster.run.produce import produces, spec_of
from pytest_gpucluster.workloads import sharedfs
from pytest_gpucluster.workloads.sharedfs import NodeReport, Prepared


class Shared(NamedTuple):
    """The prepared directory, one report per node that answered, the job id, and the nodes that
    wrote nothing into the job's folder on the shared filesystem (node → why): lost for the rest
    of the run, and named by the shared filesystem's check as not seeing it."""

    prepared: Prepared
    reports: list[NodeReport]
    job_id: str
    silent: dict[str, str]
    nodes: tuple[str, ...]  # the nodes the job ran on


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
        assert jobs.SHAREDFS.workload is not None
        spec = spec_of(ctx, jobs.SHAREDFS)
        nodes = spec.nodelist or ctx.live_nodes
        job = ctx.submit(
            jobs.SHAREDFS.workload,
            spec,
            root_template=where,
            name=prepared.name,
            token=prepared.token,
            # A node that never comes (one that does not see the job's folder) is waited for at
            # each barrier well within the job's limit: the others then report, and it is named.
            timeout_s=min(sharedfs.BARRIER_S, spec.timeout_min * 60 / 4),
        )
        try:
            results = job.results()
        except NodeLostError as exc:
            # The nodes that answered are judged on their reports; those that wrote nothing where
            # the job's files are (the shared filesystem) are named by the check as not seeing it.
            answered = [r for r in exc.answered if isinstance(r, TaskResult)]
            if not answered or not exc.lost:
                raise
            return Shared(prepared, [r.value for r in answered], job.job_id, dict(exc.lost), nodes)
        finally:
            sharedfs.cleanup(prepared)
        return Shared(prepared, [r.value for r in results], results[0].job_id, {}, nodes)

    return ctx.once(jobs.SHAREDFS.key, produce, light=jobs.SHAREDFS.light)

"""Storage: one GPU-less job on every node, in a fresh private directory the login node makes in
this user's folder on the profile's ``shared_fs`` and removes afterwards, whatever the job did."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import NamedTuple

from pytest_gpucluster.errors import GpuClusterError, NodeLostError, SharedFsFault
from pytest_gpucluster.launch import TaskResult
from pytest_gpucluster.plan import jobs
from pytest_gpucluster.run.context import JobContext
from pytest_gpucluster.run.produce import produces, spec_of
from pytest_gpucluster.workloads.storage import StorageReport

# How long a node waits at each of the job's barriers for the others, at most.
BARRIER_S = 120.0


class Stored(NamedTuple):
    """One report per node that answered, the job id and the nodes the job ran on."""

    reports: list[StorageReport]
    job_id: str
    nodes: tuple[str, ...]


@produces(jobs.STORAGE)
def stored(ctx: JobContext) -> Stored:
    """The run's storage job, once per run, sized by the profile's ``[storage]``; locally (one
    node) in the run's own temporary folder."""
    root = ctx.profile.shared_fs
    if root is None and ctx.profile.executor == "slurm":
        raise GpuClusterError(f"profile {ctx.profile.name!r} sets no shared_fs: no storage job")

    def produce() -> Stored:
        base = ctx.area if root else Path(ctx.job_root)
        try:
            directory = Path(tempfile.mkdtemp(prefix="storage-", dir=base))  # mode 0700
        except OSError as exc:
            raise SharedFsFault.cannot_write(
                str(base), str(exc.strerror or exc), "cannot make the storage job's directory"
            ) from exc
        try:
            assert jobs.STORAGE.workload is not None
            spec = spec_of(ctx, jobs.STORAGE)
            nodes = spec.nodelist or ctx.live_nodes
            job = ctx.submit(
                jobs.STORAGE.workload,
                spec,
                root_template=root or str(base),
                name=str(directory.relative_to(ctx.shared_root if root else base)),
                config=ctx.profile.storage,
                timeout_s=min(BARRIER_S, spec.timeout_min * 60 / 4),
            )
            try:
                results = job.results()
            except NodeLostError as exc:
                answered = [r for r in exc.answered if isinstance(r, TaskResult)]
                if not answered:
                    raise
                return Stored([r.value for r in answered], job.job_id, nodes)
            return Stored([r.value for r in results], results[0].job_id, nodes)
        finally:
            shutil.rmtree(directory, ignore_errors=True)

    return ctx.once(jobs.STORAGE.key, produce, light=jobs.STORAGE.light)

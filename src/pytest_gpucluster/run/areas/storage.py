"""Storage: one GPU-less job on every node, and the checkpoint job (a rank per GPU), each in a fresh
private directory the login node makes in this user's folder on the profile's ``shared_fs`` and
removes afterwards, whatever the job did."""

from __future__ import annotations

import dataclasses
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NamedTuple, TypeVar

from pytest_gpucluster.errors import GpuClusterError, NodeLostError, SharedFsFault
from pytest_gpucluster.launch import Job, TaskResult
from pytest_gpucluster.plan import jobs
from pytest_gpucluster.plan.facts import ranks_per_node
from pytest_gpucluster.run.context import JobContext
from pytest_gpucluster.run.produce import produces, spec_of
from pytest_gpucluster.workloads.storage import StorageReport
from pytest_gpucluster.workloads.storage_checkpoint import CheckpointRank
from pytest_gpucluster.workloads.training import plan_training

# How long a node waits for the others at a barrier after a phase that takes alike on every node;
# after a phase whose length is the node's own (a cold import, the streams, the metadata, the
# round trips) the wait allows for it (``workloads.storage.measure_node``), every wait ending
# before the job's time limit.
BARRIER_S = 120.0

R = TypeVar("R")


class Stored(NamedTuple):
    """One report per node that answered, the job id and the nodes the job ran on."""

    reports: list[StorageReport]
    job_id: str
    nodes: tuple[str, ...]


class Place(NamedTuple):
    """A job's private directory: the root template the nodes expand, the directory's name under
    it, the directory as the login node sees it, and the jobs that write into it."""

    root_template: str
    name: str
    directory: Path
    writers: list[Job[Any]]

    def writing(self, job: Job[R]) -> Job[R]:
        """``job``, noted as writing into the directory: it is cancelled before the directory is
        removed."""
        self.writers.append(job)
        return job


@contextmanager
def private_directory(ctx: JobContext, what: str) -> Iterator[Place]:
    """A fresh 0700 directory ``storage-*`` for one job in this user's folder on ``shared_fs``
    (locally, in the run's job folder), removed afterwards whatever the job did. A job still
    running then (an interrupt, a wait that raised) is cancelled first, so that no task goes on
    writing into the directory being removed; cancelling a job that ended does nothing."""
    root = ctx.profile.shared_fs
    if root is None and ctx.profile.executor == "slurm":
        raise GpuClusterError(f"profile {ctx.profile.name!r} sets no shared_fs: no {what}")
    base = ctx.area if root else Path(ctx.job_root)
    try:
        directory = Path(tempfile.mkdtemp(prefix="storage-", dir=base))  # mode 0700
    except OSError as exc:
        why = str(exc.strerror or exc)
        raise SharedFsFault.cannot_write(str(base), why, f"cannot make the {what}'s directory") from exc
    writers: list[Job[Any]] = []
    try:
        name = str(directory.relative_to(ctx.shared_root if root else base))
        yield Place(root or str(base), name, directory, writers)
    finally:
        try:
            for job in writers:
                job.cancel()
        finally:
            shutil.rmtree(directory, ignore_errors=True)


@produces(jobs.STORAGE)
def stored(ctx: JobContext) -> Stored:
    """The run's storage job, once per run, sized by the profile's ``[storage]``; locally (one
    node) in the run's own temporary folder. Each node runs ``streams_per_node`` streams at once,
    by default one per GPU (per CPU rank standing in where the GPUs are not real)."""
    streams = ctx.profile.storage.streams_per_node or ranks_per_node(ctx.profile, ctx.gpus_per_node)

    def produce() -> Stored:
        with private_directory(ctx, "storage job") as place:
            assert jobs.STORAGE.workload is not None
            spec = spec_of(ctx, jobs.STORAGE)
            nodes = spec.nodelist or ctx.live_nodes
            job = place.writing(
                ctx.submit(
                    jobs.STORAGE.workload,
                    spec,
                    root_template=place.root_template,
                    name=place.name,
                    config=ctx.profile.storage,
                    streams=streams,
                    timeout_s=min(BARRIER_S, spec.timeout_min * 60 / 4),
                    limit_s=spec.timeout_min * 60,
                )
            )
            try:
                results = job.results()
            except NodeLostError as exc:
                answered = [r for r in exc.answered if isinstance(r, TaskResult)]
                if not answered:
                    raise
                return Stored([r.value for r in answered], job.job_id, nodes)
            return Stored([r.value for r in results], results[0].job_id, nodes)

    return ctx.once(jobs.STORAGE.key, produce, light=jobs.STORAGE.light)


class Checkpointed(NamedTuple):
    """Every rank's save and restore, the job id, its nodes, and what model it saved."""

    ranks: list[CheckpointRank]
    job_id: str
    nodes: tuple[str, ...]
    model: str


@produces(jobs.STORAGE_CHECKPOINT)
def checkpointed(ctx: JobContext) -> Checkpointed:
    """The run's checkpoint job, once per run: the training check's model (the tiny CPU model
    where the nodes have no GPUs; ``checkpoint_layers`` deep where the profile says), a rank per
    GPU on every node (``checkpoint_ranks_per_node`` where the profile says)."""
    config = ctx.profile.storage
    training = plan_training(ctx.profile.training, gpus_per_node=ctx.gpus_per_node, real_gpus=ctx.profile.gpus_are_real)
    model = training.config.model
    if config.checkpoint_layers:
        model = dataclasses.replace(model, n_layers=config.checkpoint_layers)
    said = f"d {model.d_model}, {model.n_layers} layers, vocab {model.vocab}, AdamW"

    def produce() -> Checkpointed:
        with private_directory(ctx, "checkpoint job") as place:
            assert jobs.STORAGE_CHECKPOINT.workload is not None
            spec = spec_of(ctx, jobs.STORAGE_CHECKPOINT)
            nodes = spec.nodelist or ctx.live_nodes
            job = place.writing(
                ctx.submit(
                    jobs.STORAGE_CHECKPOINT.workload,
                    spec,
                    root_template=place.root_template,
                    name=place.name,
                    model=model,
                    max_free_share=config.max_free_share,
                    lr=training.config.lr,
                    timeout_s=spec.timeout_min * 60 / 2,
                )
            )
            results = job.results()
            return Checkpointed([r.value for r in results], results[0].job_id, nodes, said)

    return ctx.once(jobs.STORAGE_CHECKPOINT.key, produce, light=jobs.STORAGE_CHECKPOINT.light)

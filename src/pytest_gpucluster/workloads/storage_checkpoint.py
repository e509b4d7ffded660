"""Storage: a real checkpoint from every GPU of every node at once, through
``torch.distributed.checkpoint`` (DCP) into the shared filesystem.

Every rank (one per GPU; CPU ranks over gloo stand in where the nodes have none) builds the
training check's decoder, shards it with FSDP2 (``fully_shard``), takes one AdamW step so the
optimizer has state, and saves its shard of model and optimizer into one checkpoint directory.
Before the restore every rank drops the checkpoint's files from its page cache
(``posix_fadvise(DONTNEED)``), so the restore reads from the filesystem, not from memory. A fresh
model and optimizer, initialised from another seed, then load the checkpoint, and every tensor of
their state is compared bit for bit with what was saved.

Each rank times its own file I/O (the writer's and reader's ``write_data``/``read_data``, which
include DCP's fsync of every file) and the collective save and restore as a whole (planning,
metadata, the final barrier). The checkpoint's files are removed in a ``finally``, whatever
happened; the login node removes the whole directory after the job as well.
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_gpucluster.workloads.context import TaskContext
from pytest_gpucluster.workloads.distributed import device_for, pick_backend, process_group
from pytest_gpucluster.workloads.model import ModelConfig, build_model, synthetic_batches
from pytest_gpucluster.workloads.nvml_util import gpu_label
from pytest_gpucluster.workloads.sharedfs import expand
from pytest_gpucluster.workloads.storage import short_of_inodes
from pytest_gpucluster.workloads.training import cpu_threads

# Tensors named in a result when restored bits differ: enough to say where, short in a report.
NAMED_MISMATCHES = 5


@dataclass(frozen=True)
class CheckpointRank:
    """One rank's save and restore of its shard of the checkpoint."""

    node: str
    rank: int
    gpu: str  # ``gpuN`` (nvidia-smi's index) or ``cpuR`` for a CPU rank standing in
    world_size: int
    path: str = ""
    total_bytes: int = 0  # the whole checkpoint's state, every rank's shard summed
    free_bytes: int = 0
    free_inodes: int = 0  # f_favail on rank 0's view of the filesystem
    bytes_written: int = 0  # this rank's files
    write_s: float = 0.0  # this rank's own writes, fsync included
    save_s: float = 0.0  # the collective save as this rank saw it, start to end
    bytes_read: int = 0
    read_s: float = 0.0  # this rank's own reads
    restore_s: float = 0.0  # the collective load, start to end
    tensors: int = 0  # tensors of model and optimizer state compared
    mismatches: int = 0  # of those, how many restored bits differ from the saved
    mismatched: tuple[str, ...] = ()  # the first few, by name
    not_measured: str = ""  # why no checkpoint was written (free space or inodes)
    short_of_space: bool = False
    short_of_inodes: bool = False
    layers: int = 0  # the model's blocks as saved
    layers_asked: int = 0  # the profile's; more than ``layers`` where the share of free space held fewer

    @property
    def place(self) -> str:
        """``node:gpuN``, as an operator names a GPU."""
        return f"{self.node}:{self.gpu}"

    @property
    def measured(self) -> bool:
        """Whether this rank saved and restored its shard."""
        return not self.not_measured and self.save_s > 0 and self.restore_s > 0

    @property
    def write_gb_s(self) -> float:
        return self.bytes_written / 1e9 / self.write_s if self.write_s > 0 else float("nan")

    @property
    def read_gb_s(self) -> float:
        return self.bytes_read / 1e9 / self.read_s if self.read_s > 0 else float("nan")


def _writer(path: Path) -> Any:
    from torch.distributed.checkpoint.filesystem import FileSystemWriter

    class TimedWriter(FileSystemWriter):  # type: ignore[misc]
        """DCP's file writer, timing this rank's writes (synchronous: the future is done)."""

        seconds = 0.0
        written_bytes = 0

        def write_data(self, plan: Any, planner: Any) -> Any:
            start = time.perf_counter()
            future = super().write_data(plan, planner)
            written = future.wait()
            self.seconds += time.perf_counter() - start
            self.written_bytes += sum(r.storage_data.length for r in written)
            return future

    return TimedWriter(path, sync_files=True)


def _reader(path: Path) -> Any:
    from torch.distributed.checkpoint.filesystem import FileSystemReader

    class TimedReader(FileSystemReader):  # type: ignore[misc]
        """DCP's file reader, timing this rank's reads."""

        seconds = 0.0
        read_bytes = 0

        def read_data(self, plan: Any, planner: Any) -> Any:
            start = time.perf_counter()
            future = super().read_data(plan, planner)
            future.wait()
            self.seconds += time.perf_counter() - start
            self.read_bytes += sum(self.storage_data[i.storage_index].length for i in plan.items)
            return future

    return TimedReader(path)


def inodes_needed(world_size: int) -> int:
    """The files and folders the checkpoint makes: one file per rank (DCP's writer with one
    thread), the metadata file, and the run's folder and its ``checkpoint`` folder."""
    return world_size + 1 + 2


# fp32 parameters and AdamW's two fp32 moments: what a checkpoint of the model holds per parameter.
STATE_BYTES_PER_PARAM = 12


def state_bytes(cfg: ModelConfig) -> int:
    """The checkpoint's size for ``cfg`` (workloads/model.py's decoder): per block 12 d² of
    weights and two norms, the embeddings, the head and the final norm."""
    d = cfg.d_model
    per_block = 12 * d * d + 2 * d
    rest = cfg.vocab * d + cfg.seq_len * d + d + d * cfg.vocab
    return STATE_BYTES_PER_PARAM * (cfg.n_layers * per_block + rest)


def fitting(cfg: ModelConfig, budget: float) -> ModelConfig | None:
    """``cfg`` with as many of its blocks as a checkpoint of ``budget`` bytes holds (all of them
    where it fits); None where not even one block fits."""
    for layers in range(cfg.n_layers, 0, -1):
        shaped = dataclasses.replace(cfg, n_layers=layers)
        if state_bytes(shaped) <= budget:
            return shaped
    return None


def _sharded(model_cfg: ModelConfig, device: Any, seed: int, lr: float) -> tuple[Any, Any]:
    """The decoder from ``seed``, each block and the whole sharded with FSDP2, and its AdamW."""
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    model = build_model(model_cfg, device=device, seed=seed)
    mesh = init_device_mesh(device.type, (dist.get_world_size(),))
    for block in model.blocks:
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
    return model, optimizer


def _local(tensor: Any) -> Any:
    """A state tensor's local part: its shard where it is a DTensor."""
    return tensor.to_local() if hasattr(tensor, "to_local") else tensor


def flat_tensors(state: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
    """(dotted name, tensor) of every tensor in a nested state dict, in a stable order."""
    import torch

    if isinstance(state, dict):
        for key in sorted(state, key=str):
            yield from flat_tensors(state[key], f"{prefix}.{key}" if prefix else str(key))
    elif isinstance(state, list | tuple):
        for i, item in enumerate(state):
            yield from flat_tensors(item, f"{prefix}.{i}")
    elif isinstance(state, torch.Tensor):
        yield prefix, _local(state)


def bits(tensor: Any) -> Any:
    """The tensor's bytes as a flat uint8 CPU tensor: equal bits, not equal values (NaN, -0.0)."""
    import torch

    return tensor.detach().reshape(-1).contiguous().cpu().view(torch.uint8)


def mismatched(saved: dict[str, Any], restored: dict[str, Any]) -> list[str]:
    """The names whose restored bits differ from the saved ones, or that one side lacks."""
    import torch

    names = sorted(set(saved) | set(restored))
    return [n for n in names if n not in saved or n not in restored or not torch.equal(saved[n], restored[n])]


def _drop_cached(directory: Path) -> None:
    """Drop the checkpoint's files from this node's page cache, so the restore reads the
    filesystem (on NFS, the client's cache of them)."""
    for entry in os.scandir(directory):
        if entry.is_file():
            fd = os.open(entry.path, os.O_RDONLY)
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)


def _remove_own(directory: Path, rank: int) -> None:
    """This rank's files of the checkpoint; rank 0 also its metadata."""
    try:
        entries = list(os.scandir(directory))
    except FileNotFoundError:
        return
    for entry in entries:
        if entry.name.startswith(f"__{rank}_") or (rank == 0 and entry.name.startswith(".")):
            Path(entry.path).unlink(missing_ok=True)


def save_and_restore(
    ctx: TaskContext,
    *,
    root_template: str,
    name: str,
    model: ModelConfig,
    max_free_share: float = 0.1,
    lr: float = 6e-4,
    backend: str | None = None,
    timeout_s: float = 300.0,
) -> CheckpointRank:
    """Run on every rank: save this rank's shard of ``model`` and its AdamW state with DCP into
    ``name/checkpoint`` under the root, restore it into a fresh model and optimizer, compare."""
    import torch

    backend = pick_backend(backend)
    device = device_for(ctx, backend)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    elif ctx.world_size > 1:
        torch.set_num_threads(cpu_threads(ctx.tasks_per_node))
    directory = expand(root_template, os.environ) / name / "checkpoint"
    result = CheckpointRank(ctx.hostname, ctx.rank, gpu_label(device, ctx.local_rank), ctx.world_size, str(directory))
    import torch.distributed as dist

    with process_group(ctx, backend=backend, timeout_s=timeout_s):
        try:
            result = _checkpoint(ctx, result, directory, model, max_free_share, lr, device)
        finally:
            _remove_own(directory, ctx.rank)
        # Every rank's files are gone before rank 0 removes the directory. A rank whose checkpoint
        # failed waits for none; a rank that got here waits at most the group's timeout for one that
        # failed, and the login node removes the directory after the job.
        dist.barrier()
        if ctx.rank == 0:
            try:
                directory.rmdir()
            except OSError:
                pass  # a file of another writer: the login node removes the directory after the job
        return result


def _checkpoint(
    ctx: TaskContext,
    result: CheckpointRank,
    directory: Path,
    model_cfg: ModelConfig,
    max_free_share: float,
    lr: float,
    device: Any,
) -> CheckpointRank:
    import torch
    import torch.distributed as dist
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
    from torch.distributed.checkpoint.state_dict_loader import load
    from torch.distributed.checkpoint.state_dict_saver import save

    # Free space and inodes, read on rank 0 and judged alike everywhere: the checkpoint never
    # takes more than the profile's share of either; the model keeps as many blocks as that share
    # of the space holds.
    directory.mkdir(parents=True, exist_ok=True)
    vfs = os.statvfs(directory)
    said = [float(vfs.f_bavail * vfs.f_frsize), float(vfs.f_favail), float(vfs.f_files)]
    free = torch.tensor(said, dtype=torch.float64, device=device)
    dist.broadcast(free, src=0)
    free_bytes, free_inodes, inodes = (int(x) for x in free.tolist())
    result = dataclasses.replace(
        result, free_bytes=free_bytes, free_inodes=free_inodes, layers_asked=model_cfg.n_layers
    )
    fits = fitting(model_cfg, max_free_share * free_bytes)
    if fits is None:
        least = state_bytes(dataclasses.replace(model_cfg, n_layers=1))
        return dataclasses.replace(
            result,
            short_of_space=True,
            not_measured=f"the checkpoint's model with one block, {least / 2**30:.2f} GiB with its embeddings, would "
            f"take more than {max_free_share:.0%} of the {free_bytes / 2**30:.1f} GiB free on {directory}",
        )
    needed = inodes_needed(ctx.world_size)
    if short_of_inodes(max_free_share, needed, free_inodes, inodes):
        return dataclasses.replace(
            result,
            short_of_inodes=True,
            not_measured=f"the checkpoint's {needed} files and folders would take more than {max_free_share:.0%} "
            f"of the {free_inodes} inodes free on {directory}",
        )
    model_cfg = fits
    result = dataclasses.replace(result, layers=model_cfg.n_layers)
    model, optimizer = _sharded(model_cfg, device, seed=0, lr=lr)
    tokens, targets = synthetic_batches(model_cfg, micro_batch=1, pool=1, seed=ctx.rank, device=device)[0]
    model(tokens, targets).backward()
    optimizer.step()  # the optimizer's moments are state worth restoring
    model_state, optim_state = get_state_dict(model, optimizer)
    saved = {n: bits(t) for n, t in flat_tensors({"model": model_state, "optim": optim_state})}

    # The state as built, summed over ranks: the estimate above is checked before anything is written.
    total = torch.tensor([float(sum(t.numel() for t in saved.values()))], dtype=torch.float64, device=device)
    dist.all_reduce(total)
    total_bytes = int(total.item())
    result = dataclasses.replace(result, total_bytes=total_bytes)
    if total_bytes > max_free_share * free_bytes:
        return dataclasses.replace(
            result,
            short_of_space=True,
            not_measured=f"the checkpoint's {total_bytes / 2**30:.2f} GiB would take more than {max_free_share:.0%} "
            f"of the {free_bytes / 2**30:.1f} GiB free on {directory}",
        )

    writer = _writer(directory)
    dist.barrier()
    start = time.perf_counter()
    save({"model": model_state, "optim": optim_state}, storage_writer=writer)
    save_s = time.perf_counter() - start
    del model, optimizer, model_state, optim_state
    _drop_cached(directory)
    dist.barrier()

    fresh, fresh_optimizer = _sharded(model_cfg, device, seed=1, lr=lr)
    fresh_model_state, fresh_optim_state = get_state_dict(fresh, fresh_optimizer)  # the moments, zeroed
    target: dict[str, Any] = {"model": fresh_model_state, "optim": fresh_optim_state}
    reader = _reader(directory)
    dist.barrier()
    start = time.perf_counter()
    load(target, storage_reader=reader)
    restore_s = time.perf_counter() - start
    set_state_dict(fresh, fresh_optimizer, model_state_dict=target["model"], optim_state_dict=target["optim"])
    model_state, optim_state = get_state_dict(fresh, fresh_optimizer)
    restored = {n: bits(t) for n, t in flat_tensors({"model": model_state, "optim": optim_state})}
    wrong = mismatched(saved, restored)
    dist.barrier()  # every rank has read before any removes its files
    return dataclasses.replace(
        result,
        bytes_written=writer.written_bytes,
        write_s=writer.seconds,
        save_s=save_s,
        bytes_read=reader.read_bytes,
        read_s=reader.seconds,
        restore_s=restore_s,
        tensors=len(saved),
        mismatches=len(wrong),
        mismatched=tuple(wrong[:NAMED_MISMATCHES]),
    )

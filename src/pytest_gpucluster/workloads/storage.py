"""Storage: how fast the shared filesystem is, seen from every node at once.

One task per node, all nodes in one allocation, in a fresh private directory the login node made
on the shared filesystem (``run.areas.storage``). Every node, after a barrier so that they run at
once: times a cold ``import`` of the jobs' framework in a fresh interpreter, writes one large file
in large blocks and reads it back (O_DIRECT where the filesystem takes it, else through the page
cache with fsync and ``posix_fadvise(DONTNEED)`` before the read, so the read comes from the
filesystem, not from memory), creates, stats and unlinks many small files in a directory of its
own, then plays ping-pong with its neighbour through files (``storage_coherence``) and takes part in
locks held across nodes (``lockf`` and ``flock``). Every wait is bounded and ends before the job's
time limit; every file a node makes is removed in a ``finally``. The measurements are the workload's
own (plain Python, no external benchmark tool): ``StorageReport.tool`` says so.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Annotated

from pytest_gpucluster.workloads.context import TaskContext
from pytest_gpucluster.workloads.sharedfs import _barrier, expand
from pytest_gpucluster.workloads.storage_coherence import (
    LOCK_KINDS,
    WARM_UP,
    GaveUp,
    LargeDirectory,
    LockResult,
    RoundTrips,
    large_directory,
    lock_across_nodes,
    ping_pong,
    ping_pong_bound_s,
)
from pytest_gpucluster.workloads.storage_streams import (
    BUFFERED,
    DIRECT,
    ENGINES,
    Stream,
    Streams,
    measure_streams,
    python_streams,
)

__all__ = ["BUFFERED", "DIRECT", "GaveUp", "Stream", "Streams"]

MiB = 2**20
# Runs in the fresh interpreter: the module's name comes as an argument, never as code.
IMPORT_SCRIPT = (
    "import importlib, sys, time\n"
    "t = time.perf_counter()\n"
    "importlib.import_module(sys.argv[1])\n"
    "print(time.perf_counter() - t)\n"
)


# The barriers of the job, in the order every node meets them (``checks.storage`` reads a wait
# given up at one of them as a node missing from it).
BARRIERS = (
    "start",
    "streams",
    "metadata",
    "visibility",
    "renamed",
    "lock-held",
    "lock-tried",
    "lock-released",
    "large-dir",
    "large-written",
    "large-listed",
)
# Every wait ends this share of the job's time limit before the limit: the task starts after the
# job does, and its report still has to come back.
END_SHARE = 0.1
# After a phase whose length depends on the node (the streams, the metadata), the others wait for
# it up to this share of the time the job has left, the rest kept for the phases after.
WAIT_SHARE = 0.5

# The lock files the job makes: one per kind of lock tried across nodes.
LOCK_FILES = len(LOCK_KINDS)
# A stream's file is never smaller than this: below it the rate is the device's latency, not its
# throughput.
MIN_STREAM_BYTES = 256 * MiB


def stream_bytes(config: StorageConfig, files: int, free: int) -> int:
    """Each stream file's size: the profile's ``file_bytes``, smaller where ``files`` of them
    would take more than ``max_free_share`` of ``free`` (whole blocks); 0 where what fits is less
    than ``MIN_STREAM_BYTES`` (the streams are then not measured)."""
    fits = int(config.max_free_share * free) // max(1, files)
    size = min(config.file_bytes, fits - fits % config.block_bytes)
    return size if size >= min(MIN_STREAM_BYTES, config.file_bytes) else 0


def inodes_needed(config: StorageConfig, streams: int, world: int) -> int:
    """The files and folders the storage job makes on the shared filesystem, at most: every
    node's streams, metadata files, ping-pong files (written and renamed), lock files and barrier
    marks, and the large directory. Counted as if none were removed in between, so it bounds what
    is in use at once."""
    pings = 4 * (config.visibility_tries + WARM_UP)  # ping and pong, written and renamed
    per_node = streams + config.metadata_files + 2 + pings + 2 + LOCK_FILES + len(BARRIERS)
    large = config.large_dir_files + 1 if config.large_dir_files and world > 1 else 0  # none on one node
    return world * per_node + large


def short_of_inodes(share: float, needed: int, favail: int, files: int) -> bool:
    """Whether ``needed`` inodes take more than ``share`` (the profile's ``max_free_share``) of the
    ``favail`` free; never where the filesystem counts no inodes (``f_files`` 0: it makes them as
    needed)."""
    return files > 0 and needed > share * favail


@dataclass(frozen=True)
class StorageConfig:
    """``[profiles.NAME.storage]``: the sizes and bounds of the storage job."""

    # "bytes": thresholds.toml may write "4GiB"
    file_bytes: Annotated[int, "bytes"] = 4 * 2**30  # each stream's file: written, then read back
    block_bytes: Annotated[int, "bytes"] = 16 * MiB  # each write and read; a multiple of 4 KiB (O_DIRECT)
    direct: bool = True  # false: through the page cache (dropped) even where O_DIRECT works
    streams_per_node: int = 0  # streams at once on each node (0: one per GPU, or per CPU rank standing in)
    engine: str = "auto"  # "fio" where the node has it, else the workload's own Python; or "fio", "python"
    max_free_share: float = 0.1  # all nodes' files together take at most this share of free space
    metadata_files: int = 2000  # small files created, stat'ed and unlinked per node
    large_dir_files: int = 100_000  # one directory of this many files, listed from another node (0: none)
    visibility_tries: int = 10  # round trips between each node and its neighbour
    visibility_timeout_s: float = 5.0  # the longest wait for one file to appear
    import_module: str = "torch"  # "" leaves the cold import out
    import_timeout_s: float = 120.0
    large_dir_timeout_s: float = 900.0  # the longest wait for the large directory's writer, then its lister
    checkpoint: bool = True  # false leaves the checkpoint from every GPU out
    checkpoint_layers: int = 0  # the checkpoint's model: the training check's, with this many layers (0: its own)
    checkpoint_ranks_per_node: int = 0  # the checkpoint's ranks per node (0: one per GPU, or per CPU rank standing in)

    def __post_init__(self) -> None:
        if self.block_bytes < 4096 or self.block_bytes % 4096:
            raise ValueError(f"block_bytes must be a positive multiple of 4096, got {self.block_bytes}")
        if self.file_bytes < self.block_bytes:
            raise ValueError(f"file_bytes ({self.file_bytes}) must be at least block_bytes ({self.block_bytes})")
        if not 0 < self.max_free_share <= 0.5:
            raise ValueError(f"max_free_share must be in (0, 0.5], got {self.max_free_share:g}")
        if self.streams_per_node < 0 or self.large_dir_files < 0:
            raise ValueError("streams_per_node and large_dir_files must be 0 or more")
        if self.engine not in ENGINES:
            raise ValueError(f"engine must be one of {', '.join(ENGINES)}, got {self.engine!r}")
        if self.checkpoint_ranks_per_node < 0:
            raise ValueError(f"checkpoint_ranks_per_node must be 0 or more, got {self.checkpoint_ranks_per_node}")
        if self.checkpoint_layers < 0:
            raise ValueError(
                f"checkpoint_layers must be 0 (the training model's depth) or more, got {self.checkpoint_layers}"
            )
        if self.metadata_files < 1 or self.visibility_tries < 1:
            raise ValueError("metadata_files and visibility_tries must be at least 1")
        if self.visibility_timeout_s <= 0 or self.import_timeout_s <= 0 or self.large_dir_timeout_s <= 0:
            raise ValueError("visibility_timeout_s, import_timeout_s and large_dir_timeout_s must be positive")
        if self.import_module and not all(p.isidentifier() for p in self.import_module.split(".")):
            raise ValueError(f"import_module must be a dotted module name, got {self.import_module!r}")


@dataclass(frozen=True)
class MountFacts:
    """The mount that holds a path, from ``/proc/self/mountinfo``."""

    mount_point: str
    fstype: str
    source: str
    options: tuple[str, ...]  # the mount's and the superblock's options, sorted

    def describe(self) -> str:
        """``nfs4 10.0.0.5:/export at /mnt/shared``."""
        return f"{self.fstype} {self.source} at {self.mount_point}"


def _unescape(text: str) -> str:
    for code, char in (("\\040", " "), ("\\011", "\t"), ("\\012", "\n"), ("\\134", "\\")):
        text = text.replace(code, char)
    return text


def mount_facts(path: str, mountinfo: str) -> MountFacts | None:
    """The mount whose mount point is the longest prefix of the resolved ``path``, with its
    options (the per-mount ones and the superblock's, e.g. NFS's ``vers``, ``nconnect``,
    ``proto``)."""
    best: MountFacts | None = None
    for line in mountinfo.splitlines():
        left, sep, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if not sep or len(fields) < 6 or len(tail) < 2:
            continue
        point = _unescape(fields[4])
        inside = path == point or path.startswith(point.rstrip("/") + "/")
        if inside and (best is None or len(point) >= len(best.mount_point)):
            options = {*fields[5].split(","), *(tail[2].split(",") if len(tail) > 2 else [])}
            best = MountFacts(point, tail[0], _unescape(tail[1]), tuple(sorted(options)))
    return best


@dataclass(frozen=True)
class StorageReport:
    """What one node measured of the shared filesystem."""

    node: str
    rank: int
    path: str
    tool: str = "python"
    mount: MountFacts | None = None
    free_bytes: int = 0
    free_inodes: int = 0  # f_favail, the inodes an unprivileged user may still take
    short_of_inodes: bool = False  # nothing written: the job's files would take too many of them
    stream: Streams | None = None  # the node's streams, one per GPU, all at once
    not_measured: str = ""  # why the stream was not measured (free space, an error)
    short_of_space: bool = False  # not measured: the files would take too much of the free space
    metadata_files: int = 0
    metadata_s: tuple[float, float, float] = (0.0, 0.0, 0.0)  # create, stat, unlink
    peer: str = ""  # the neighbour this node played ping-pong with
    round_trips_s: tuple[float, ...] = ()  # this node's write seen by the peer and its answer seen back
    round_trips_missed: int = 0  # tries whose answer did not appear within the timeout
    renamed: RoundTrips | None = None  # the same with files renamed into place, each read whole
    lock: LockResult | None = None  # the POSIX record lock (fcntl.lockf)
    flock: LockResult | None = None  # the BSD lock (fcntl.flock)
    large_dir: LargeDirectory | None = None
    import_module: str = ""
    import_s: float | None = None
    import_error: str = ""
    python: str = ""  # the jobs' interpreter
    python_mount: str = ""  # where it lies
    barrier_timeout: GaveUp | None = None  # the barrier this node gave up at; nothing after it ran
    errors: tuple[str, ...] = ()

    @property
    def metadata_ops_s(self) -> float:
        """Creates, stats and unlinks per second over the three phases."""
        total = sum(self.metadata_s)
        return 3 * self.metadata_files / total if total > 0 else float("nan")


def measure_node(
    ctx: TaskContext,
    *,
    root_template: str,
    name: str,
    config: StorageConfig,
    streams: int = 1,
    timeout_s: float = 90.0,
    limit_s: float,
) -> StorageReport:
    """Run on every node (one task each) inside the private directory ``name`` under the root;
    ``streams``: the node's streams at once (one per GPU, as the login node resolved it);
    ``timeout_s``: the wait at a barrier after a phase that takes alike on every node;
    ``limit_s``: the job's time limit, before which every wait ends (``END_SHARE``)."""
    end = time.monotonic() + (1 - END_SHARE) * limit_s
    directory = expand(root_template, os.environ) / name
    try:
        mountinfo = Path("/proc/self/mountinfo").read_text()
    except OSError:
        mountinfo = ""
    report = StorageReport(
        node=ctx.hostname or socket.gethostname(),
        rank=ctx.rank,
        path=str(directory),
        mount=mount_facts(os.path.realpath(directory), mountinfo),
        python=sys.executable,
    )
    env_mount = mount_facts(os.path.realpath(sys.executable), mountinfo)
    report = replace(report, python_mount=env_mount.describe() if env_mount else "")
    if not directory.is_dir():
        return replace(report, errors=(f"{directory} does not exist on this node",))
    world, rank = ctx.world_size, ctx.rank
    hosts = ctx.hostnames if len(ctx.hostnames) == world else ()

    def meet(barrier: str, wait_s: float | None = None) -> GaveUp | None:
        wait = max(0.0, min(timeout_s if wait_s is None else wait_s, end - time.monotonic()))
        missing = _barrier(directory, barrier, rank, world, wait)
        if not missing:
            return None
        return GaveUp(barrier, tuple(missing), tuple(hosts[m] for m in missing) if hosts else (), wait)

    def after_own_pace() -> float:
        # The wait after a phase that takes as long as the filesystem makes it on each node (what
        # is measured, so no size tells it beforehand): a slow node is waited for as long as the
        # job leaves room, so that it is judged by its own figures and its peers still measure
        # the phases after.
        return max(timeout_s, WAIT_SHARE * (end - time.monotonic()))

    if gave_up := meet("start"):
        return replace(report, barrier_timeout=gave_up)
    if config.import_module:
        seconds, error = _cold_import(config)
        report = replace(report, import_module=config.import_module, import_s=seconds, import_error=error)
    vfs = os.statvfs(directory)
    free = vfs.f_bavail * vfs.f_frsize
    report = replace(report, free_bytes=free, free_inodes=vfs.f_favail)
    needed = inodes_needed(config, streams, world)
    if short_of_inodes(config.max_free_share, needed, vfs.f_favail, vfs.f_files):
        # Every node reads the same filesystem's count and stops here alike: nothing is written.
        where = report.mount.describe() if report.mount else str(directory)
        return replace(
            report,
            short_of_inodes=True,
            not_measured=f"{needed} files and folders the job makes would take more than "
            f"{config.max_free_share:.0%} of the {vfs.f_favail} inodes free on {where}: nothing written",
        )
    # Another node's cold import may take up to its timeout.
    if gave_up := meet("streams", timeout_s + (config.import_timeout_s if config.import_module else 0.0)):
        return replace(report, barrier_timeout=gave_up)
    size = stream_bytes(config, streams * world, free)
    if not size:
        report = replace(
            report,
            short_of_space=True,
            not_measured=f"{world} node(s) × {streams} stream(s) × {MIN_STREAM_BYTES / 2**20:.0f} MiB, the "
            f"least that measures a stream, would take more than {config.max_free_share:.0%} of the "
            f"{free / 2**30:.1f} GiB free",
        )
    else:
        try:
            measured = measure_streams(
                directory,
                rank,
                streams=streams,
                size_bytes=size,
                block_bytes=config.block_bytes,
                direct=config.direct,
                engine=config.engine,
            )
            report = replace(report, stream=measured, tool=measured.tool)
        except (OSError, subprocess.SubprocessError) as exc:
            report = replace(report, not_measured=f"the write/read streams failed: {exc}")
    if gave_up := meet("metadata", after_own_pace()):
        return replace(report, barrier_timeout=gave_up)
    try:
        report = replace(
            report,
            metadata_files=config.metadata_files,
            metadata_s=_metadata(directory / f"meta-{rank}", config.metadata_files),
        )
    except OSError as exc:
        report = replace(report, errors=(*report.errors, f"metadata phase failed: {exc}"))
    if world > 1:
        if gave_up := meet("visibility", after_own_pace()):
            return replace(report, barrier_timeout=gave_up)
        peer = hosts[(rank + 1) % world] if hosts else str((rank + 1) % world)
        tries, each_s = config.visibility_tries, config.visibility_timeout_s
        try:
            written = ping_pong(directory, rank, world, tries, each_s)
            report = replace(report, peer=peer, round_trips_s=written.trips, round_trips_missed=written.missed)
        except OSError as exc:  # every try counts as missed: the pair is judged, not passed over
            report = replace(
                report,
                peer=peer,
                round_trips_missed=tries,
                errors=(*report.errors, f"visibility phase failed: {exc}"),
            )
        # Another node's ping-pong may take up to its bound.
        arrive_s = timeout_s + ping_pong_bound_s(tries, each_s)
        if gave_up := meet("renamed", arrive_s):
            return replace(report, barrier_timeout=gave_up)
        try:
            report = replace(report, renamed=ping_pong(directory, rank, world, tries, each_s, renamed=True))
        except OSError as exc:
            report = replace(
                report, renamed=RoundTrips(missed=tries), errors=(*report.errors, f"renamed visibility failed: {exc}")
            )
        locks = {got.kind: got for got in lock_across_nodes(directory, rank, meet, each_s, arrive_s)}
        report = replace(report, lock=locks["lockf"], flock=locks["flock"])
    # One node has no other node to list the directory from: its own listing would be of its own
    # cache, and the check that reads it needs two nodes.
    if config.large_dir_files and world > 1:
        if gave_up := meet("large-dir"):
            return replace(report, barrier_timeout=gave_up)
        found = large_directory(directory, rank, world, config.large_dir_files, meet, config.large_dir_timeout_s)
        report = replace(report, large_dir=found)
    return report


def _cold_import(config: StorageConfig) -> tuple[float | None, str]:
    """The seconds a fresh interpreter takes to import the module, or why it could not."""
    try:
        proc = subprocess.run(
            [sys.executable, "-c", IMPORT_SCRIPT, config.import_module],
            capture_output=True,
            text=True,
            timeout=config.import_timeout_s,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return None, f"import {config.import_module} took over {config.import_timeout_s:.0f} s"
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return None, f"import {config.import_module} failed: {last}"
    try:
        return float(proc.stdout.strip().splitlines()[-1]), ""
    except (ValueError, IndexError):
        return None, f"import {config.import_module} printed {proc.stdout[-200:]!r}"


def measure_stream(path: Path, config: StorageConfig) -> Stream:
    """One stream of ``file_bytes`` in ``block_bytes`` blocks through the Python engine, written,
    fsync'd and read back; the file is removed afterwards whatever happens."""
    try:
        return python_streams([path], config.file_bytes, config.block_bytes, config.direct).each[0]
    finally:
        path.unlink(missing_ok=True)


def _metadata(directory: Path, count: int) -> tuple[float, float, float]:
    """Seconds to create, stat and unlink ``count`` empty files in a directory of their own."""
    directory.mkdir()
    names = [str(directory / f"f{i:07d}") for i in range(count)]
    try:
        start = time.perf_counter()
        for name in names:
            os.close(os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
        created = time.perf_counter()
        for name in names:
            os.stat(name)
        stated = time.perf_counter()
        for name in names:
            os.unlink(name)
        return created - start, stated - created, time.perf_counter() - stated
    finally:
        for name in names:
            try:
                os.unlink(name)
            except FileNotFoundError:
                pass
        directory.rmdir()

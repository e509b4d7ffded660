"""Storage: a node's large-block streams, one per GPU (or as many as the profile says), all at once.

Each stream writes one file of ``file_bytes`` in ``block_bytes`` blocks, fsync'd, then, once every
stream has written, reads it back. Two engines, one result shape (``Streams``):

* ``fio`` where the node has it (``engine = "auto"``) or the profile asks for it: one fio run per
  phase with a job per stream, started with an argument list (never a shell), its
  ``--output-format=json`` parsed. Blocks carry fio's crc32c headers; the read verifies them.
* the workload's own Python otherwise: a thread per stream (``os.write``/``os.readv`` release the
  GIL), each block carrying its index, checked on the read.

Both use O_DIRECT where the filesystem takes it, else the page cache with fsync and
``posix_fadvise(DONTNEED)`` before the read (fio's ``invalidate``), so the read comes from the
filesystem, not from memory. Every file a stream makes is removed afterwards, whatever happens.
"""

from __future__ import annotations

import errno
import json
import mmap
import os
import shutil
import subprocess
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DIRECT = "O_DIRECT"
BUFFERED = "page cache dropped (fsync + posix_fadvise DONTNEED)"
ENGINES = ("auto", "fio", "python")
# Bounds one fio phase; the job's own time limit ends a slower one first.
FIO_TIMEOUT_S = 3600.0


@dataclass(frozen=True)
class Stream:
    """One stream's large-block write and read-back of one file."""

    mode: str  # DIRECT or BUFFERED
    size_bytes: int
    block_bytes: int
    write_s: float
    read_s: float
    verified: bool  # every block read back was the one written there

    @property
    def write_mb_s(self) -> float:
        return self.size_bytes / 1e6 / self.write_s if self.write_s > 0 else float("nan")

    @property
    def read_mb_s(self) -> float:
        return self.size_bytes / 1e6 / self.read_s if self.read_s > 0 else float("nan")


@dataclass(frozen=True)
class Streams:
    """A node's streams, all at once: each stream's own rates, and the node's over each phase
    from the first stream's start to the last one's end."""

    tool: str  # "fio" or "python"
    mode: str  # DIRECT where every stream ran so, else BUFFERED
    each: tuple[Stream, ...]
    write_s: float
    read_s: float

    @property
    def size_bytes(self) -> int:
        return sum(s.size_bytes for s in self.each)

    @property
    def block_bytes(self) -> int:
        return self.each[0].block_bytes if self.each else 0

    @property
    def write_mb_s(self) -> float:
        return self.size_bytes / 1e6 / self.write_s if self.write_s > 0 else float("nan")

    @property
    def read_mb_s(self) -> float:
        return self.size_bytes / 1e6 / self.read_s if self.read_s > 0 else float("nan")

    @property
    def verified(self) -> bool:
        return bool(self.each) and all(s.verified for s in self.each)


def fio_argv(
    fio: str, *, way: str, prefix: str, streams: int, size_bytes: int, block_bytes: int, direct: bool
) -> list[str]:
    """fio's arguments for one phase (``way``: "write" or "read") of ``streams`` jobs on the files
    ``<prefix>.<job>`` of the working directory."""
    argv = [
        fio,
        f"--name={way}",
        f"--filename_format={prefix}.$jobnum",
        f"--rw={way}",
        f"--bs={block_bytes}",
        f"--size={size_bytes}",
        f"--numjobs={streams}",
        "--ioengine=psync",
        f"--direct={int(direct)}",
        "--verify=crc32c",
        "--verify_state_save=0",
        "--output-format=json",
    ]
    if way == "write":
        argv += ["--end_fsync=1", "--do_verify=0"]  # the read phase verifies
    return argv


@dataclass(frozen=True)
class FioJob:
    """One fio job's phase as its JSON output reports it."""

    error: int  # errno, 0 if none
    io_bytes: int
    runtime_s: float


def parse_fio(text: str, way: str) -> list[FioJob]:
    """The jobs of one fio run's ``--output-format=json`` (after any error lines fio printed
    before it), for the phase ``way``."""
    start = text.find("{")
    if start < 0:
        raise ValueError(f"fio printed no JSON: {text[-300:]!r}")
    document = json.loads(text[start:])
    return [
        FioJob(int(job.get("error", 0)), int(job[way]["io_bytes"]), int(job[way]["runtime"]) / 1e3)
        for job in document["jobs"]
    ]


def _fio_phase(fio: str, directory: Path, way: str, **args: Any) -> tuple[list[FioJob], str]:
    proc = subprocess.run(
        fio_argv(fio, way=way, **args),
        cwd=directory,
        capture_output=True,
        text=True,
        timeout=FIO_TIMEOUT_S,
        check=False,
    )
    try:
        return parse_fio(proc.stdout, way), proc.stderr.strip()
    except (ValueError, KeyError) as exc:
        raise OSError(f"fio {way} (exit {proc.returncode}): {proc.stderr.strip()[-300:] or exc}") from exc


def fio_streams(fio: str, directory: Path, prefix: str, streams: int, size_bytes: int, block_bytes: int,
                direct: bool) -> Streams:  # fmt: skip
    """``streams`` fio jobs writing at once, then reading back; O_DIRECT where the filesystem
    takes it."""
    for use_direct in (True, False) if direct else (False,):
        args = dict(prefix=prefix, streams=streams, size_bytes=size_bytes, block_bytes=block_bytes, direct=use_direct)
        writes, said = _fio_phase(fio, directory, "write", **args)
        if use_direct and any(j.error == errno.EINVAL for j in writes):  # the filesystem refuses O_DIRECT
            continue
        if any(j.error for j in writes):
            raise OSError(f"fio write: {os.strerror(next(j.error for j in writes if j.error))}; {said[-300:]}")
        reads, _ = _fio_phase(fio, directory, "read", **args)
        return streams_from_fio(writes, reads, block_bytes, DIRECT if use_direct else BUFFERED)
    raise OSError(errno.EINVAL, f"fio cannot write in {directory}")


def streams_from_fio(writes: Sequence[FioJob], reads: Sequence[FioJob], block_bytes: int, mode: str) -> Streams:
    """The streams of fio's two phases: job i wrote and read file i; a job that erred (a block
    whose crc32c header did not match on the read) is not verified. fio starts a phase's jobs
    together, so the node's phase lasts as long as its longest job."""
    each = tuple(
        Stream(mode, w.io_bytes, block_bytes, w.runtime_s, r.runtime_s, not (w.error or r.error))
        for w, r in zip(writes, reads, strict=True)
    )
    return Streams("fio", mode, each, max(w.runtime_s for w in writes), max(r.runtime_s for r in reads))


def python_streams(paths: Sequence[Path], size_bytes: int, block_bytes: int, direct: bool) -> Streams:
    """A thread per file writing at once, then reading back, each block's index checked."""
    blocks = size_bytes // block_bytes
    buffers = [mmap.mmap(-1, block_bytes) for _ in paths]  # page-aligned, as O_DIRECT needs
    for buffer in buffers:
        buffer.write(os.urandom(block_bytes))
    try:
        with ThreadPoolExecutor(len(paths)) as pool:
            start = time.perf_counter()
            writes = list(pool.map(lambda i: _write(paths[i], buffers[i], blocks, direct=direct), range(len(paths))))
            write_s = time.perf_counter() - start
            start = time.perf_counter()
            reads = list(
                pool.map(
                    lambda i: _read(paths[i], buffers[i], blocks, direct=writes[i][0] == DIRECT), range(len(paths))
                )
            )
            read_s = time.perf_counter() - start
    finally:
        for buffer in buffers:
            buffer.close()
    each = tuple(
        Stream(mode, blocks * block_bytes, block_bytes, w, r, ok)
        for (mode, w), (r, ok) in zip(writes, reads, strict=True)
    )
    mode = DIRECT if all(s.mode == DIRECT for s in each) else BUFFERED
    return Streams("python", mode, each, write_s, read_s)


def measure_streams(
    directory: Path, rank: int, *, streams: int, size_bytes: int, block_bytes: int, direct: bool, engine: str = "auto"
) -> Streams:
    """This node's ``streams`` at once in ``directory`` by the engine asked for (``auto``: fio
    where the node has it); their files removed afterwards whatever happens."""
    fio = shutil.which("fio") if engine in ("auto", "fio") else None
    if engine == "fio" and fio is None:
        raise OSError(errno.ENOENT, 'the profile asks for fio (engine = "fio") and this node has none')
    prefix = f"stream-{rank}"
    paths = [directory / f"{prefix}.{i}" for i in range(streams)]
    try:
        if fio:
            return fio_streams(fio, directory, prefix, streams, size_bytes, block_bytes, direct)
        return python_streams(paths, size_bytes, block_bytes, direct)
    finally:
        for path in paths:
            path.unlink(missing_ok=True)


def _write(path: Path, buffer: mmap.mmap, blocks: int, *, direct: bool) -> tuple[str, float]:
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC
    for mode in (DIRECT, BUFFERED) if direct else (BUFFERED,):
        extra = getattr(os, "O_DIRECT", 0) if mode == DIRECT else 0
        if mode == DIRECT and not extra:
            continue
        try:
            fd = os.open(path, flags | extra, 0o600)
        except OSError as exc:
            if mode == DIRECT and exc.errno == errno.EINVAL:  # the filesystem refuses O_DIRECT
                continue
            raise
        try:
            start = time.perf_counter()
            for i in range(blocks):
                buffer[:8] = i.to_bytes(8, "little")
                os.write(fd, buffer)
            os.fsync(fd)
            elapsed = time.perf_counter() - start
            if mode == BUFFERED:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            return mode, elapsed
        except OSError as exc:
            if mode == DIRECT and exc.errno == errno.EINVAL:  # accepted at open, refused at write
                continue
            raise
        finally:
            os.close(fd)
    raise OSError(errno.EINVAL, f"cannot write {path}")


def _read(path: Path, buffer: mmap.mmap, blocks: int, *, direct: bool) -> tuple[float, bool]:
    fd = os.open(path, os.O_RDONLY | (getattr(os, "O_DIRECT", 0) if direct else 0))
    try:
        if not direct:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        verified = True
        start = time.perf_counter()
        for i in range(blocks):
            got = os.readv(fd, [buffer])
            verified = verified and got == len(buffer) and int.from_bytes(buffer[:8], "little") == i
        return time.perf_counter() - start, verified
    finally:
        os.close(fd)

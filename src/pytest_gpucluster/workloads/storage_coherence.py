"""Storage, across nodes: how soon a file one node writes is seen by another, and whether a lock
taken on one node keeps the others out (a POSIX record lock and a ``flock``, each tried). Runs
inside ``storage.measure_node``.

Visibility is timed as a round trip, so no two nodes' clocks are compared: a node writes a ping
file, its neighbour (the next rank) opens it by name as soon as it can and answers with a pong
file, and the first node times from its write to opening the pong. A round trip bounds each
direction's visibility from above. Every node pings its neighbour and answers its predecessor at
the same time (the answering runs on a thread). A first exchange, not timed, waits for the
neighbour to be answering: the nodes leave the barrier before it at different moments, and that
skew is the barrier's, not a file's way to another node. The files are looked up by name, as a
job that waits for another's output does; on NFS a cached negative lookup then delays the
answer, which is what is measured. A second ping-pong does the same with renamed files: each is
written under a temporary name, fsync'd and renamed, and read whole under its new name on the
other node, as a job publishes a finished checkpoint or result; a rename seen before its data is
counted apart.
"""

from __future__ import annotations

import errno
import fcntl
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

POLL_S = 0.005


@dataclass(frozen=True)
class GaveUp:
    """A barrier a node gave up waiting at: the ranks still missing when its wait ran out and,
    where the job names them, their nodes (in the order of ``missing``)."""

    barrier: str
    missing: tuple[int, ...]
    nodes: tuple[str, ...] = ()
    waited_s: float = 0.0

    def __str__(self) -> str:
        return f"{self.barrier}: rank(s) {list(self.missing)} missing after {self.waited_s:.0f} s"


class Meet(Protocol):
    """The job's bounded barrier: waits at ``barrier`` until every node is there, ``wait_s`` at
    most (None: the job's usual wait), never past the job's end; what was missing, or None."""

    def __call__(self, barrier: str, wait_s: float | None = None) -> GaveUp | None: ...


def _appears(path: Path, deadline: float) -> bool:
    """Whether ``path`` can be opened before ``deadline`` (polled by name)."""
    while True:
        try:
            os.close(os.open(path, os.O_RDONLY))
            return True
        except FileNotFoundError:
            if time.monotonic() > deadline:
                return False
            time.sleep(POLL_S)


def _publish(path: Path) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.write(fd, b"x")
        os.fsync(fd)
    finally:
        os.close(fd)


# The untimed first exchange of every ping-pong (ping-0, pong-0): it waits for the neighbour to
# be answering, so that no timed try holds the nodes' skew in leaving the barrier before it.
WARM_UP = 1


def ping_pong_bound_s(tries: int, timeout_s: float) -> float:
    """The longest one ``ping_pong`` takes on one node: its own tries and the first exchange, each
    answered within ``timeout_s`` or missed, then its answers to the predecessor, each ping waited
    for twice as long."""
    return 3 * (tries + WARM_UP) * timeout_s


@dataclass(frozen=True)
class RoundTrips:
    """One node's round trips to its neighbour: the seconds of each answered try, the tries whose
    answer did not come within the timeout, and, for renamed files, the tries where one of the
    two files was seen under its new name but short (the ping as the neighbour read it, or the
    pong as this node read it)."""

    trips: tuple[float, ...] = ()
    missed: int = 0
    incomplete: int = 0


# A renamed file's size: more than one page and one network read, so that a rename seen before
# the data is seen short.
RENAMED_BYTES = 64 * 1024
# What a neighbour answers where the renamed ping it read was short.
SEEN_SHORT = b"seen short"


def _content(name: str) -> bytes:
    """The known content of the renamed file ``name`` (``ping-3``), ``RENAMED_BYTES`` long."""
    line = f"{name} whole\n".encode()
    return (line * (RENAMED_BYTES // len(line) + 1))[:RENAMED_BYTES]


def _publish_renamed(path: Path, data: bytes) -> None:
    """Write ``data`` under a temporary name beside ``path``, fsync it, rename it to ``path``."""
    temporary = path.with_name(f".{path.name}.tmp")
    with open(temporary, "xb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.rename(temporary, path)


def _read_when_there(path: Path, deadline: float) -> bytes | None:
    """``path``'s content once it can be opened before ``deadline`` (polled by name), else None."""
    while True:
        try:
            with open(path, "rb") as f:
                return f.read()
        except FileNotFoundError:
            if time.monotonic() > deadline:
                return None
            time.sleep(POLL_S)


def ping_pong(
    directory: Path, rank: int, world: int, tries: int, timeout_s: float, *, renamed: bool = False
) -> RoundTrips:
    """This node's round trips to its neighbour and the tries whose answer did not come within
    ``timeout_s``; meanwhile it answers its predecessor's pings. ``renamed``: every ping and pong
    is written under a temporary name and renamed (as a job publishes a finished file), and each
    side reads the whole file under its new name: a try is answered only where both were seen
    whole. The first exchange is not timed and not counted (``WARM_UP``): it waits for the
    neighbour to be answering. Its files are removed."""
    folder = "ren" if renamed else "vis"
    mine = directory / f"{folder}-{rank}"
    mine.mkdir()
    theirs = directory / f"{folder}-{(rank - 1) % world}"

    exchanges = WARM_UP + tries

    def answer() -> None:
        for i in range(exchanges):
            # The predecessor's folder and ping come from another node: wait for both by name.
            deadline = time.monotonic() + 2 * timeout_s
            try:
                if not renamed:
                    if _appears(theirs / f"ping-{i}", deadline):
                        _publish(theirs / f"pong-{i}")
                elif (got := _read_when_there(theirs / f"ping-{i}", deadline)) is not None:
                    whole = got == _content(f"ping-{i}")
                    _publish_renamed(theirs / f"pong-{i}", _content(f"pong-{i}") if whole else SEEN_SHORT)
            except OSError:
                return

    answering = threading.Thread(target=answer, daemon=True)
    answering.start()
    trips: list[float] = []
    missed = incomplete = 0
    try:
        for i in range(exchanges):
            start = time.monotonic()
            short = False
            if not renamed:
                _publish(mine / f"ping-{i}")
                seen = _appears(mine / f"pong-{i}", start + timeout_s)
            else:
                _publish_renamed(mine / f"ping-{i}", _content(f"ping-{i}"))
                got = _read_when_there(mine / f"pong-{i}", start + timeout_s)
                seen, short = got is not None, got is not None and got != _content(f"pong-{i}")
            elapsed = time.monotonic() - start
            if i < WARM_UP:
                continue
            if short:
                incomplete += 1
            elif seen:
                trips.append(elapsed)
            else:
                missed += 1
        answering.join(timeout=2 * timeout_s * exchanges)
    finally:
        # The predecessor answers into this node's folder: it is removed by its owner, after.
        _remove(mine, ("ping-", "pong-", ".ping-", ".pong-"), exchanges)
    return RoundTrips(tuple(trips), missed, incomplete)


def _remove(directory: Path, prefixes: tuple[str, ...], tries: int) -> None:
    for prefix in prefixes:
        for i in range(tries):
            (directory / f"{prefix}{i}").unlink(missing_ok=True)
            (directory / f"{prefix}{i}.tmp").unlink(missing_ok=True)
    try:
        directory.rmdir()
    except OSError:
        pass  # a late answer: the login node removes the whole directory after the job


# The kinds of lock tried across nodes, at once, each on a file of its own. A POSIX record lock
# (``fcntl.lockf``) and a BSD lock (``fcntl.flock``) are separate mechanisms: an NFS client sends
# the first to the server and emulates the second with it, unless the mount keeps flock locks on
# the client (``local_lock=flock``/``all``), so one may be shared where the other is not.
LOCK_KINDS = ("lockf", "flock")
LOCK_FILE = {"lockf": "lock", "flock": "flock"}


@dataclass(frozen=True)
class LockResult:
    """One kind of lock across nodes (``kind``: "lockf", a POSIX record lock through fcntl, or
    "flock"): rank 0 holds it, the others try."""

    holder: bool  # this node held the lock while the others tried
    kept_out: bool | None = None  # another node's lock kept this one out (None: the holder)
    taken_after: bool | None = None  # this node took it once the holder let go (None: the holder)
    error: str = ""
    gave_up: GaveUp | None = None  # the barrier of the lock check this node stopped at
    kind: str = "lockf"


def lock_across_nodes(
    directory: Path, rank: int, meet: Meet, timeout_s: float, arrive_s: float
) -> tuple[LockResult, ...]:
    """For every kind of lock (``LOCK_KINDS``), at once: rank 0 takes an exclusive lock on the
    kind's shared file; every other node must find it taken (non-blocking try), then take it once
    rank 0 has let go (retried within ``timeout_s``, as the others compete for it too). A kind
    that fails on a node (its error said) does not stop the others. ``meet`` is the job's bounded
    barrier; ``arrive_s`` the wait at the first one, which allows for the phase before on the
    other nodes. One result per kind, in the order of ``LOCK_KINDS``."""
    holder = rank == 0
    fds: dict[str, int] = {}
    error: dict[str, str] = {}
    kept_out: dict[str, bool] = {}
    taken: dict[str, bool] = {}

    def path(kind: str) -> Path:
        return directory / LOCK_FILE[kind]

    def each(step: Callable[[str], None]) -> None:
        for kind in LOCK_KINDS:
            if kind in error:
                continue
            try:
                step(kind)
            except OSError as exc:
                error[kind] = f"{kind} on {path(kind)}: {exc.strerror or exc}"

    def hold(kind: str) -> None:
        fds[kind] = os.open(path(kind), os.O_RDWR | os.O_CREAT, 0o600)
        if not _take_within(fds[kind], timeout_s, kind):  # never a blocking wait on a lock server
            error[kind] = f"{kind} on {path(kind)}: not taken within {timeout_s:.0f} s"

    def try_once(kind: str) -> None:
        fds[kind] = os.open(path(kind), os.O_RDWR)
        kept_out[kind] = not _try_lock(fds[kind], kind)
        if not kept_out[kind]:
            _unlock(fds[kind], kind)

    def take(kind: str) -> None:
        taken[kind] = _take_within(fds[kind], timeout_s, kind)
        if taken[kind]:
            _unlock(fds[kind], kind)

    def stopped(gave_up: GaveUp) -> tuple[LockResult, ...]:
        return tuple(LockResult(holder, error=error.get(k, str(gave_up)), gave_up=gave_up, kind=k) for k in LOCK_KINDS)

    try:
        if holder:
            each(hold)
        if gave_up := meet("lock-held", arrive_s):
            return stopped(gave_up)
        if not holder:
            each(try_once)
        if gave_up := meet("lock-tried"):
            return stopped(gave_up)
        if holder:
            each(lambda kind: _unlock(fds[kind], kind))
        if gave_up := meet("lock-released"):
            return stopped(gave_up)
        if not holder:
            each(take)
        return tuple(
            LockResult(holder, kept_out.get(k), taken.get(k), error.get(k, ""), kind=k)
            if not holder
            else LockResult(True, error=error.get(k, ""), kind=k)
            for k in LOCK_KINDS
        )
    finally:
        for fd in fds.values():
            os.close(fd)


def _take_within(fd: int, timeout_s: float, kind: str) -> bool:
    """Whether the exclusive lock was taken within ``timeout_s`` (non-blocking tries)."""
    deadline = time.monotonic() + timeout_s
    while not (taken := _try_lock(fd, kind)) and time.monotonic() < deadline:
        time.sleep(POLL_S)
    return taken


def _try_lock(fd: int, kind: str) -> bool:
    try:
        if kind == "flock":
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        else:
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except OSError as exc:
        if exc.errno in (errno.EACCES, errno.EAGAIN):
            return False
        raise


def _unlock(fd: int, kind: str) -> None:
    if kind == "flock":
        fcntl.flock(fd, fcntl.LOCK_UN)
    else:
        fcntl.lockf(fd, fcntl.LOCK_UN)


@dataclass(frozen=True)
class LargeDirectory:
    """One directory of many files written by one node and listed by another (the next rank)."""

    writer: bool  # this node wrote the files
    files: int = 0  # the writer: files it made
    create_s: float = 0.0
    listed: int | None = None  # the lister: files it counted (None: not the lister)
    list_s: float = 0.0
    error: str = ""
    gave_up: GaveUp | None = None  # the barrier of the large directory this node stopped at


def large_directory(directory: Path, rank: int, world: int, count: int, meet: Meet, timeout_s: float) -> LargeDirectory:
    """Rank 0 creates ``count`` empty files in one directory; the next rank (rank 0 itself on one
    node) then lists it, counting the entries; rank 0 removes the files afterwards. ``meet`` is the
    job's bounded barrier, given ``timeout_s`` for the wait on the writer."""
    large = directory / "large"
    writer, lister = rank == 0, rank == 1 % world
    result = LargeDirectory(writer)
    made = 0
    try:
        if writer:
            try:
                large.mkdir()
                start = time.perf_counter()
                for made in range(count):
                    os.close(os.open(large / f"f{made:07d}", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
                made = count
                result = LargeDirectory(True, made, time.perf_counter() - start)
            except OSError as exc:
                result = LargeDirectory(True, made, error=f"creating file {made} in {large}: {exc.strerror or exc}")
        if gave_up := meet("large-written", timeout_s):
            return LargeDirectory(writer, result.files, result.create_s, error=str(gave_up), gave_up=gave_up)
        if lister:
            try:
                start = time.perf_counter()
                with os.scandir(large) as entries:
                    listed = sum(1 for _ in entries)
                result = LargeDirectory(writer, result.files, result.create_s, listed, time.perf_counter() - start)
            except OSError as exc:
                result = LargeDirectory(writer, result.files, result.create_s, 0, error=f"listing {large}: {exc}")
        if gave_up := meet("large-listed", timeout_s):
            return LargeDirectory(
                writer, result.files, result.create_s, result.listed, result.list_s, str(gave_up), gave_up
            )
        return result
    finally:
        if writer:
            _remove_files(large, made)


def _remove_files(large: Path, count: int) -> None:
    for i in range(count + 1):
        (large / f"f{i:07d}").unlink(missing_ok=True)
    try:
        large.rmdir()
    except OSError:
        pass  # the login node removes the whole directory after the job

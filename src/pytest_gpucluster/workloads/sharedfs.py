"""Shared filesystem: one task per node, all nodes in one allocation.

The login node makes a fresh private (0700) directory on the shared filesystem, in the running
user's folder there, and writes a marker into it (``prepare``); every node then checks it sees
that marker, writes and reads back its neighbour's file, appends to one shared file and publishes
a file by atomic rename. The nodes meet at barriers made of files in that same directory, each
wait bounded, so a filesystem that is not shared ends in a report instead of a hang. ``prepare``
and ``cleanup`` (which removes the directory) run on the login node around the job: they own the
layout the nodes read. ``checks.sharedfs`` turns the reports into sentences on the login node.

``shared_fs`` may contain ``$VARS`` (``/scratch/$USER``): each side expands them in its own
environment, as a shell on that node would.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import secrets
import shutil
import socket
import stat
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from string import Template

from pytest_gpucluster.errors import SharedFsFault
from pytest_gpucluster.workloads.context import TaskContext

MARKER = "login-marker"
APPEND_FILE = "append.log"
GiB = 2**30


def expand(template: str, env: Mapping[str, str]) -> Path:
    """``template`` with ``$VAR``/``${VAR}`` from ``env`` and a leading ``~`` expanded; unknown
    variables stay as written."""
    text = Template(template).safe_substitute(env)
    if text.startswith("~"):
        text = os.path.expanduser(text)
    return Path(text)


@dataclass(frozen=True)
class Mount:
    """The mount that holds a path: where it is mounted, its type and its source."""

    mount_point: str
    fstype: str
    source: str

    def describe(self) -> str:
        """``nfs4 10.0.0.5:/export at /mnt/sharedfs``."""
        return f"{self.fstype} {self.source} at {self.mount_point}"


def _unescape(text: str) -> str:
    # mountinfo writes space, tab, newline and backslash as octal escapes.
    for code, char in (("\\040", " "), ("\\011", "\t"), ("\\012", "\n"), ("\\134", "\\")):
        text = text.replace(code, char)
    return text


def mount_of(path: str, mountinfo: str) -> Mount | None:
    """The mount (from ``/proc/self/mountinfo`` text) whose mount point is the longest prefix of
    the resolved ``path``."""
    best: Mount | None = None
    for line in mountinfo.splitlines():
        left, sep, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if not sep or len(fields) < 5 or len(tail) < 2:
            continue
        point = _unescape(fields[4])
        inside = path == point or path.startswith(point.rstrip("/") + "/")
        if inside and (best is None or len(point) >= len(best.mount_point)):
            best = Mount(point, tail[0], _unescape(tail[1]))
    return best


@dataclass(frozen=True)
class Prepared:
    """What the login node made: the private directory and the marker's token."""

    root_template: str
    root: str  # as the login node resolved it
    name: str  # the private directory's path under ``root``
    token: str

    @property
    def directory(self) -> Path:
        """The private directory as the login node sees it."""
        return Path(self.root) / self.name

    def root_of(self, directory: str) -> Path:
        """The root above the private directory as a node named it (``NodeReport.path``)."""
        return Path(directory).parents[len(Path(self.name).parts) - 1]


def prepare(root_template: str, env: Mapping[str, str] | None = None, *, within: str = "") -> Prepared:
    """On the login node: make ``<root>/<within>/sharedfs-<random>`` (``within``: this user's
    folder under the root, made by the caller; without it ``<root>/.pytest-gpucluster-sharedfs-
    <random>``) with mode 0700 and write the marker every node must find. SharedFsFault (a fault
    outside the nodes) names the path when ``root`` cannot be written."""
    root = expand(root_template, os.environ if env is None else env)
    token = secrets.token_hex(16)
    name = f"{within}/sharedfs-{token[:12]}" if within else f".pytest-gpucluster-sharedfs-{token[:12]}"
    directory = root / name
    try:
        directory.mkdir(mode=0o700)
        directory.chmod(0o700)  # mkdir's mode is filtered by the umask; the check wants exactly 0700
        _write(directory / MARKER, token.encode())
    except OSError as exc:
        shutil.rmtree(directory, ignore_errors=True)
        raise SharedFsFault.cannot_write(
            str(root),
            str(exc.strerror or exc),
            f"cannot make a private directory in it; is the shared filesystem ({root_template}) mounted "
            "and writable on the login node?",
        ) from exc
    return Prepared(root_template, str(root), name, token)


def cleanup(prepared: Prepared) -> None:
    """Remove the private directory (also after a failed or cancelled job)."""
    shutil.rmtree(prepared.directory, ignore_errors=True)


def _write(path: Path, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@dataclass(frozen=True)
class NodeReport:
    """What one node saw of the shared filesystem."""

    node: str
    rank: int
    path: str  # the private directory as this node resolved it
    root_exists: bool
    mount: Mount | None = None
    fsid: int = 0
    capacity_bytes: int = 0
    free_bytes: int = 0
    marker: str = "missing"  # "ok", "missing", "different"
    mode: int = 0  # permission bits of the private directory as this node sees them
    wrote: Mapping[str, str] = field(default_factory=dict)  # file name → sha256 this node wrote
    read: Mapping[str, str] = field(default_factory=dict)  # file name → sha256 read ("" if absent)
    appended: int = 0  # lines this node appended
    append_lines: Mapping[int, int] = field(default_factory=dict)  # rank → lines seen afterwards
    append_garbled: int = 0  # lines of the shared file that are not whole lines of any node
    # Seconds from the first read of the shared file to a read that held every node's lines: 0
    # when the first did; None when none did within APPEND_SETTLE_S (``append_lines`` is the last).
    append_settle_s: float | None = 0.0
    barrier_timeout: str = ""  # "<barrier>: ranks [..] missing after N s", when a wait ran out
    errors: tuple[str, ...] = ()


def _barrier(directory: Path, name: str, rank: int, world: int, timeout_s: float) -> list[int]:
    """Announce this rank at ``name`` and wait (bounded) for all others; returns the ranks still
    missing when the wait ran out. Lists the directory each round: on NFS a fresh listing
    revalidates the directory, where a lookup of a missing name may hit a cached negative entry."""
    (directory / f".barrier-{name}-{rank}").touch()
    deadline = time.monotonic() + timeout_s
    while True:
        present = set(os.listdir(directory))
        missing = [r for r in range(world) if f".barrier-{name}-{r}" not in present]
        if not missing or time.monotonic() > deadline:
            return missing
        time.sleep(0.2)


# How long a node waits at each barrier for the others, at most.
BARRIER_S = 90.0
# How long a node reads the shared file again while it lacks lines the others appended and
# closed: a client that serves a stale copy after they closed it (no close-to-open consistency)
# shows every line within its cache's timeout; a lost line never shows.
APPEND_SETTLE_S = 5.0


def check_node(
    ctx: TaskContext,
    *,
    root_template: str,
    name: str,
    token: str,
    file_bytes: int = 2**20,
    append_lines: int = 50,
    timeout_s: float = BARRIER_S,
) -> NodeReport:
    """Run on every node (one task each): identity, capacity, cross-node read-back, concurrent
    appends and an atomic rename, all inside the private directory ``name`` under the root."""
    root = expand(root_template, os.environ)
    directory = root / name
    report = NodeReport(
        node=ctx.hostname or socket.gethostname(), rank=ctx.rank, path=str(directory), root_exists=root.is_dir()
    )
    if not report.root_exists:
        return report
    try:
        mountinfo = Path("/proc/self/mountinfo").read_text()
    except OSError:
        mountinfo = ""
    vfs = os.statvfs(root)
    report = replace(
        report,
        mount=mount_of(os.path.realpath(root), mountinfo),
        fsid=vfs.f_fsid,
        capacity_bytes=vfs.f_blocks * vfs.f_frsize,
        free_bytes=vfs.f_bavail * vfs.f_frsize,
    )
    try:
        seen = (directory / MARKER).read_text()
    except OSError:
        return report
    report = replace(report, marker="ok" if seen == token else "different", mode=stat.S_IMODE(directory.stat().st_mode))
    if report.marker != "ok":
        return report
    return _exchange(report, directory, ctx.world_size, token, file_bytes, append_lines, timeout_s)


def _exchange(
    report: NodeReport, directory: Path, world: int, token: str, file_bytes: int, append_lines: int, timeout_s: float
) -> NodeReport:
    rank = report.rank
    wrote: dict[str, str] = {}
    read: dict[str, str] = {}
    errors: list[str] = []
    neighbour = (rank + 1) % world  # a ring: every node is read by one other node, and reads one

    def done(
        timeout: str = "",
        appended: int = 0,
        counts: Mapping[int, int] | None = None,
        garbled: int = 0,
        settle_s: float | None = 0.0,
    ) -> NodeReport:
        return replace(
            report,
            wrote=wrote,
            read=read,
            barrier_timeout=timeout,
            errors=tuple(errors),
            appended=appended,
            append_lines=dict(counts or {}),
            append_garbled=garbled,
            append_settle_s=settle_s,
        )

    def meet(barrier: str) -> str:
        missing = _barrier(directory, barrier, rank, world, timeout_s)
        return f"{barrier}: rank(s) {missing} missing after {timeout_s:.0f} s" if missing else ""

    if timeout := meet("start"):
        return done(timeout)
    # All nodes write their own file at once: concurrent writes to distinct files.
    data_name = f"data-{rank}.bin"
    payload = os.urandom(file_bytes)
    _write(directory / data_name, payload)
    wrote[data_name] = hashlib.sha256(payload).hexdigest()
    # Then all append to one file. Each line is one write under a POSIX lock: O_APPEND alone is
    # not atomic across NFS clients, and applications that share a log lock it the same way.
    fd = os.open(directory / APPEND_FILE, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    appended = 0
    try:
        for i in range(append_lines):
            fcntl.lockf(fd, fcntl.LOCK_EX)
            try:
                os.write(fd, f"{rank} {i} {token[:8]}\n".encode())
                os.fsync(fd)
                appended += 1
            finally:
                fcntl.lockf(fd, fcntl.LOCK_UN)
    except OSError as exc:
        errors.append(f"append to {APPEND_FILE} failed after {appended} line(s): {exc}")
    finally:
        os.close(fd)
    # Publish by rename: the reader must never see a partial file under the final name.
    renamed = f"renamed-{rank}.bin"
    payload = os.urandom(file_bytes)
    _write(directory / f".{renamed}.tmp", payload)
    os.replace(directory / f".{renamed}.tmp", directory / renamed)
    wrote[renamed] = hashlib.sha256(payload).hexdigest()
    if timeout := meet("written"):
        return done(timeout, appended)
    for wanted in (f"data-{neighbour}.bin", f"renamed-{neighbour}.bin"):
        try:
            read[wanted] = _sha(directory / wanted)
        except OSError as exc:
            read[wanted] = ""
            errors.append(f"cannot read {wanted}: {exc.strerror or exc}")
    counts, garbled, settle_s = _settled_lines(directory / APPEND_FILE, token[:8], world, append_lines)
    return done("", appended, counts, garbled, settle_s)


def _settled_lines(path: Path, tag: str, world: int, each: int) -> tuple[dict[int, int], int, float | None]:
    """The shared file's lines per rank, read again (a fresh open each time) while a rank has
    fewer than ``each``, for at most APPEND_SETTLE_S; with the seconds until a read held them
    all (None: none did)."""
    start = time.monotonic()
    reads = 0
    while True:
        counts, garbled = _count_lines(path, tag, world)
        reads += 1
        if all(n >= each for n in counts.values()):
            return counts, garbled, round(time.monotonic() - start, 3) if reads > 1 else 0.0
        if time.monotonic() - start > APPEND_SETTLE_S:
            return counts, garbled, None
        time.sleep(0.1)


def _count_lines(path: Path, tag: str, world: int) -> tuple[dict[int, int], int]:
    counts = dict.fromkeys(range(world), 0)
    garbled = 0
    for line in path.read_bytes().split(b"\n")[:-1]:
        parts = line.decode(errors="replace").split()
        if len(parts) == 3 and parts[2] == tag and parts[0].isdigit() and int(parts[0]) in counts:
            counts[int(parts[0])] += 1
        else:
            garbled += 1
    return counts, garbled

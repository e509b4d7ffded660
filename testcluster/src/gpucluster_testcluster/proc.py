"""Subprocess and pid-file helpers shared by the other modules."""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path


class ClusterError(RuntimeError):
    """The test cluster could not be brought into the requested state."""


def run(
    argv: Sequence[str | os.PathLike[str]],
    *,
    timeout: float = 60.0,
    check: bool = True,
    env: Mapping[str, str] | None = None,
    input_text: str | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` with captured text output; raise ClusterError on failure."""
    args = [os.fspath(a) for a in argv]
    try:
        proc = subprocess.run(
            args,
            capture_output=True,
            text=True,
            timeout=timeout,
            env=dict(env) if env is not None else None,
            input=input_text,
            stdin=None if input_text is not None else subprocess.DEVNULL,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise ClusterError(f"timed out after {timeout:.0f}s: {' '.join(args)}") from exc
    except FileNotFoundError as exc:
        raise ClusterError(f"command not found: {args[0]}") from exc
    if check and proc.returncode != 0:
        detail = (proc.stderr or proc.stdout).strip()
        raise ClusterError(f"{' '.join(args)} exited {proc.returncode}: {detail}")
    return proc


def read_pid(pid_file: Path) -> int | None:
    try:
        text = pid_file.read_text().strip()
    except (FileNotFoundError, NotADirectoryError):
        return None
    return int(text) if text.isdigit() else None


def process_exe_name(pid: int) -> str | None:
    try:
        return os.path.basename(os.readlink(f"/proc/{pid}/exe"))
    except OSError:
        return None


def pid_matches(pid: int, expected: str) -> bool:
    """True if ``pid`` runs a binary whose name starts with ``expected``.

    Guards against signalling an unrelated process that reused a stale pid.
    Debian names the Slurm daemons ``slurmd-wlm`` etc., hence the prefix test.
    """
    name = process_exe_name(pid)
    return name is not None and name.removesuffix(" (deleted)").startswith(expected)


def alive_from_pid_file(pid_file: Path, expected: str) -> int | None:
    pid = read_pid(pid_file)
    if pid is not None and pid_matches(pid, expected):
        return pid
    return None


def _wait_gone(pids: Sequence[int], timeout: float) -> list[int]:
    deadline = time.monotonic() + timeout
    left = list(pids)
    while left and time.monotonic() < deadline:
        left = [p for p in left if _exists(p)]
        if left:
            time.sleep(0.05)
    return left


def _exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie counts as gone: its parent, not us, must reap it.
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def terminate(pids: Sequence[int], *, grace: float = 5.0) -> None:
    """SIGTERM, then SIGKILL whatever is still there after ``grace`` seconds."""
    for pid in pids:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    left = _wait_gone(pids, grace)
    for pid in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    _wait_gone(left, 2.0)


def wait_for(what: str, predicate: Callable[[], bool], timeout: float, interval: float = 0.1) -> None:
    """Poll ``predicate()`` until true; raise ClusterError after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while True:
        if predicate():
            return
        if time.monotonic() >= deadline:
            raise ClusterError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)


# Outside the state dir, which `down` deletes.
LOCK_FILE = Path("/run/lock/gpucluster-testcluster.lock")


@contextlib.contextmanager
def exclusive(timeout: float = 600.0) -> Iterator[None]:
    """Serialize up/down across processes (parallel CI jobs, pytest-xdist workers)."""
    LOCK_FILE.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise ClusterError(f"another up/down holds {LOCK_FILE} for over {timeout:.0f}s") from None
                time.sleep(0.2)
        yield
    finally:
        os.close(fd)

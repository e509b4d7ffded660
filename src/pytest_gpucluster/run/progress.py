"""Live progress: the ``[gpucluster]`` lines an operator reads while the run waits on Slurm, and
the run's log of job states. Only what one waits on or must know is printed: a queue wait with
its reason and who waits, the start of a job that queued for a while, a cancel or a failure."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from typing import Any

QUIET_WAIT_S = 20.0  # a job that started within this many seconds of queueing gets no second line


class Progress:
    """The run's live lines. ``waiter`` says who waits on a pending job ("started ahead for X",
    "for test_y") or nothing."""

    def __init__(self, waiter: Callable[[], str] = str) -> None:
        self.lines: list[str] = []  # every job state and status line, for the run's log
        self._waiter = waiter
        self._pending_since: dict[str, float] = {}
        self._terminal: Any = None
        self._capture: Any = None  # pytest's capture manager: live lines go past the test's capture
        self._lock = threading.Lock()

    def attach(self, terminal: Any, capture: Any) -> None:
        """Print to pytest's terminal reporter from now on (terminal or not: CI logs too)."""
        self._terminal, self._capture = terminal, capture

    def say(self, line: str) -> None:
        """One live ``[gpucluster]`` line, also while a test runs with its output captured and from
        the threads of early starts (one at a time)."""
        if self._terminal is None:
            return
        with self._lock:
            uncaptured = self._capture.global_and_fixture_disabled() if self._capture else contextlib.nullcontext()
            with uncaptured:
                self._terminal.write_line(f"[gpucluster] {line}")

    def status(self, line: str) -> None:
        """A line for the run's log, printed live as well."""
        self.lines.append(line)
        self.say(line)

    def job_status(self, job_id: str, state: str, reason: str) -> None:
        """A job's new state: logged always, printed when an operator waits on it or must know."""
        line = f"job {job_id} {state}" + (f" ({reason})" if reason and reason != "None" else "")
        self.lines.append(line)
        now = time.monotonic()
        if state == "PENDING":
            self._pending_since.setdefault(job_id, now)
            waiter = self._waiter()
            if waiter:
                line += f" {waiter}"
        elif state.startswith(("CANCEL", "TIMEOUT", "NODE_FAIL", "FAILED", "OUT_OF_ME")):
            self._pending_since.pop(job_id, None)
        elif job_id in self._pending_since:
            waited = now - self._pending_since.pop(job_id)
            if waited < QUIET_WAIT_S:
                return
            line = f"job {job_id} {state} after {waited:.0f} s in the queue"
        else:
            return
        self.say(line)

"""Slurm daemons that do not answer for a while: which failures say so, and how long a command is
tried again.

A controller that restarts or fails over, or a slurmdbd that restarts, answers no client for
seconds. A Slurm command whose failure says its daemon could not be reached (``unreachable``) is
tried again with backoff (``retry_delay``) until that daemon has not answered for the retry window
(``slurm_retry_s`` of the profile); past it the command raises ``DaemonUnreachable``, a fault of
the cluster, not of any node. The window counts from the first failure of the outage and is shared
by every command and thread (``Outages``, one per run, on the run's ``slurm.Slurm`` client), so
one outage costs the run at most one window however many commands meet it; the first command that
succeeds ends the outage.

Pure apart from ``Outages``' clock and lock: no subprocess here (``slurm.Slurm.run`` calls it).
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from pytest_gpucluster.errors import DAEMON_NAMES, DaemonUnreachable

T = TypeVar("T")

DEFAULT_WINDOW_S = 60.0
FIRST_DELAY_S = 1.0
MAX_DELAY_S = 8.0

# The daemon each client command talks to; every other Slurm command talks to slurmctld.
DAEMON_OF = {"sacct": "slurmdbd", "sacctmgr": "slurmdbd"}

# Words of Slurm 22.05–24.05 clients (stderr, or stdout for ``scontrol ping``) that say the
# daemon was not reached or did not answer; any other failure is the daemon's answer.
_NOT_REACHED = (
    "unable to contact slurm controller",  # connect failure: the request never arrived
    "connection refused",
    "slurm backup controller in standby mode",
    "failed to open persistent connection",  # sacct → slurmdbd
    "problem talking to the database",
)
_NO_ANSWER = (
    "socket timed out on send/recv operation",  # the request may have arrived
    "zero bytes were transmitted or received",
    "communication connection failure",
    "did not answer within",  # the client's own timeout
    "reported errors and no data",  # slurm.run_json: a --json listing without an answer
)

# ``scontrol ping`` with the primary controller down ("Slurmctld(primary) at HOST is DOWN"); a
# backup that is down while the primary answers is the health check's finding, not an outage.
_PRIMARY_DOWN = re.compile(r"\(primary\) at \S+ is down")


@dataclass(frozen=True)
class Unreachable:
    """A failure that says a daemon did not answer: which daemon, and whether the request
    certainly never reached it (then a submission is safe to send again)."""

    daemon: str
    not_received: bool


def unreachable(command: str, text: str) -> Unreachable | None:
    """Whether the failure ``text`` of client ``command`` (``sbatch``, ``squeue``, ...) says its
    daemon could not be reached; None when it is the daemon's own answer (a bad job id, a
    refused submission), which no retry changes."""
    low = text.lower()
    daemon = DAEMON_OF.get(command, "slurmctld")
    if any(words in low for words in _NOT_REACHED):
        return Unreachable(daemon, not_received=True)
    if any(words in low for words in _NO_ANSWER) or _PRIMARY_DOWN.search(low):
        return Unreachable(daemon, not_received=False)
    return None


def retry_delay(attempt: int, down_s: float, window_s: float) -> float | None:
    """Seconds to wait before trying a command again after its ``attempt``-th failure (0 first),
    when its daemon has not answered for ``down_s``; None once the window is spent. The delay
    doubles from ``FIRST_DELAY_S`` up to ``MAX_DELAY_S`` and never runs past the window."""
    left = window_s - down_s
    if left <= 0:
        return None
    return float(min(FIRST_DELAY_S * 2.0**attempt, MAX_DELAY_S, left))


class Outages:
    """When each daemon first failed to answer in its current outage; shared by every thread."""

    def __init__(
        self,
        window_s: float = DEFAULT_WINDOW_S,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.window_s = window_s
        self._clock = clock
        self._sleep = sleep
        self._lock = threading.Lock()
        self._since: dict[str, float] = {}
        self._first: dict[str, str] = {}
        self._past: dict[str, list[tuple[float, float]]] = {}  # outages that ended: (from, to)
        self._said: dict[str, str] = {}  # the sentence of each daemon's latest outage
        self._when: dict[str, str] = {}  # when (UTC) each daemon's latest outage began
        self._certain: dict[str, bool] = {}  # whether its quoted failure says "not contacted"
        # Told (daemon, the failure) once when an outage begins and (daemon, "") when it ends.
        self.on_change: Callable[[str, str], None] | None = None

    def failed(self, daemon: str, text: str, *, certain: bool = False, sent_at: float | None = None) -> float:
        """Note a failure to reach ``daemon``; how long it has not answered (from ``sent_at``,
        when the unanswered request went out, for the first). ``certain``: the failure says the
        daemon could not be contacted at all; the outage's sentence quotes the first such failure
        rather than a vaguer one before it."""
        now = self._clock()
        with self._lock:
            began = daemon not in self._since
            since = self._since.setdefault(daemon, now if sent_at is None else min(now, sent_at))
            if began:
                self._when[daemon] = time.strftime("%H:%M:%S", time.gmtime())
            if began or (certain and not self._certain.get(daemon)):
                self._first[daemon] = text
                self._certain[daemon] = certain
                name = DAEMON_NAMES.get(daemon, daemon)
                self._said[daemon] = f"{name} stopped answering at {self._when[daemon]} UTC ({text})"
        if began and self.on_change is not None:
            self.on_change(daemon, text)
        return now - since

    def answered(self, daemon: str) -> None:
        """``daemon`` answered: its outage, if any, is over."""
        with self._lock:
            since = self._since.pop(daemon, None)
            self._first.pop(daemon, None)
            self._certain.pop(daemon, None)
            ended = since is not None
            if since is not None:
                self._past.setdefault(daemon, []).append((since, self._clock()))
        if ended and self.on_change is not None:
            self.on_change(daemon, "")

    def down_s(self, daemon: str) -> float | None:
        """How long ``daemon`` has not answered, or None when it answers."""
        with self._lock:
            since = self._since.get(daemon)
        return None if since is None else self._clock() - since

    def downtime(self, daemon: str, since: float) -> float:
        """Seconds ``daemon`` has not answered since ``since`` (a monotonic time): what a job
        that waited in the queue from then waited for the daemon, not for its nodes."""
        now = self._clock()
        with self._lock:
            spans = [*self._past.get(daemon, []), *([(self._since[daemon], now)] if daemon in self._since else [])]
        return sum(max(0.0, end - max(start, since)) for start, end in spans)

    def ended_ago(self, daemon: str) -> float | None:
        """Seconds since ``daemon``'s latest outage ended (0 while one goes on); None when it
        never stopped answering."""
        now = self._clock()
        with self._lock:
            if daemon in self._since:
                return 0.0
            past = self._past.get(daemon)
        return now - past[-1][1] if past else None

    def first_error(self, daemon: str) -> str:
        with self._lock:
            return self._first.get(daemon, "")

    def sentence(self, daemon: str) -> str:
        """One sentence for ``daemon``'s latest outage, the same for every check it stopped:
        "the Slurm controller (slurmctld) stopped answering at 10:14:05 UTC (<first failure>)";
        empty when it never stopped answering."""
        with self._lock:
            return self._said.get(daemon, "")

    def attempt(self, command: str, once: Callable[[], T], *, resend: bool = True) -> T:
        """``once()`` until it succeeds, fails for another reason, or its daemon has not answered
        for the window: then ``DaemonUnreachable``. ``resend`` false (a submission): a failure
        that may have reached the daemon is not tried again, since the job may exist."""
        tries = 0
        while True:
            sent_at = self._clock()
            try:
                value = once()
            except Exception as exc:
                said = unreachable(command, str(exc))
                if said is None:
                    raise
                down = self.failed(said.daemon, str(exc), certain=said.not_received, sent_at=sent_at)
                delay = retry_delay(tries, down, self.window_s) if (resend or said.not_received) else None
                if delay is None:
                    sent = not resend and not said.not_received
                    fault = DaemonUnreachable(said.daemon, down, str(exc), sent=sent)
                    fault.fault_sentence = self.sentence(said.daemon)
                    raise fault from exc
                self._sleep(delay)
                tries += 1
                continue
            self.answered(DAEMON_OF.get(command, "slurmctld"))
            return value

"""Running Slurm's client commands from the login node: every command has a timeout and an argv
list (no shell); one that cannot reach its daemon is tried again for the retry window
(``slurm_retry``). JSON output is preferred to parsing text.

A run asks through its one ``Slurm``: what the run has learned of its Slurm lives there (the
daemons' outages, which command lists nodes, whether sacct has JSON output), not in this module."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import threading
from collections.abc import Mapping
from typing import Any

from pytest_gpucluster.errors import SlurmQueryError
from pytest_gpucluster.slurm.retry import Outages

TIMEOUT_S = 30.0


class Slurm:
    """One run's client of Slurm and what the run has learned of it: the daemons' outages
    (``outages``: one retry window per outage, shared by every command and thread), the command
    that lists nodes on this Slurm (``node_source``, ``node_info.nodes``) and whether its sacct
    has JSON output (``sacct_text_only``, ``queue.accounted_nodes``). The session makes one per
    run and hands it down; a launcher made on its own makes its own."""

    def __init__(self, outages: Outages | None = None) -> None:
        self.outages = Outages() if outages is None else outages
        self.node_source: str | None = None  # "sinfo" or "scontrol", once an answer held nodes
        self.sacct_text_only = False  # set once sacct is seen to have no JSON output
        self.lock = threading.Lock()  # around what is learned, read from several threads

    def run(self, argv: list[str], timeout_s: float = TIMEOUT_S, env: Mapping[str, str] | None = None) -> str:
        """Run a Slurm client command; its stdout, or SlurmQueryError naming the command. A
        failure that says the daemon could not be reached is tried again until the daemon has not
        answered for the retry window (``slurm_retry``), then raises ``DaemonUnreachable``.
        ``env``: variables set for it over the process's own."""
        return self.outages.attempt(
            argv[0], lambda: _run_once(argv, timeout_s) if env is None else _run_with(argv, timeout_s, env)
        )

    def run_json(self, argv: list[str], timeout_s: float = TIMEOUT_S, *, retry: bool = True) -> dict[str, Any]:
        """Run a command with ``--json`` output and parse it. A listing that carries only errors
        (what ``sinfo --json`` prints, exiting 0, while slurmctld is down) is no answer: retried
        as a command that could not reach its daemon. ``retry`` false: one try, for a question
        the caller can do without (SlurmQueryError when it fails; no outage is recorded)."""
        if not retry:
            return _parse_json(argv, _run_once(argv, timeout_s))
        return self.outages.attempt(argv[0], lambda: _parse_json(argv, _run_once(argv, timeout_s)))

    def answers(self, daemon: str) -> bool:
        """One try, no retry: whether ``daemon`` (``slurmctld``, ``slurmdbd``) answers now; an
        answer ends its outage."""
        argv = ["sacct", "-X", "-n", "-j", "1"] if daemon == "slurmdbd" else ["scontrol", "ping"]
        try:
            _run_once(argv, TIMEOUT_S)
        except SlurmQueryError:
            return False
        self.outages.answered(daemon)
        return True


def _run_once(argv: list[str], timeout_s: float) -> str:
    return _run_with(argv, timeout_s, None)


def _run_with(argv: list[str], timeout_s: float, env: Mapping[str, str] | None) -> str:
    """One try of ``argv``; ``env``: variables set for it over the process's own."""
    if shutil.which(argv[0]) is None:
        raise SlurmQueryError(f"`{argv[0]}` is not on PATH; is slurm-client installed on this login node?")
    full = {**os.environ, **env} if env else None
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, check=False, env=full)
    except subprocess.TimeoutExpired:
        raise SlurmQueryError(f"`{' '.join(argv)}` did not answer within {timeout_s:.0f} s.") from None
    if proc.returncode != 0:
        raise SlurmQueryError(
            f"`{' '.join(argv)}` exited {proc.returncode}: {telling_line(proc.stderr or proc.stdout)}"
        )
    return proc.stdout


def telling_line(text: str) -> str:
    """The line of a client's output that says what went wrong: the last one that is not a
    banner of asterisks (``scontrol ping`` frames "RESTORE SLURMCTLD DAEMON TO SERVICE" in them)."""
    lines = [line.strip() for line in text.strip().splitlines()]
    said = [line for line in lines if line and not line.startswith("**") and set(line) != {"*"}]
    return said[-1] if said else (lines[-1] if lines else "no output")


def _parse_json(argv: list[str], out: str) -> dict[str, Any]:
    try:
        data: dict[str, Any] = json.loads(out)
    except json.JSONDecodeError as exc:
        raise SlurmQueryError(f"`{' '.join(argv)}` printed no valid JSON ({exc}).") from None
    errors = data.get("errors") or []
    if errors and not any(data.get(key) for key in ("nodes", "jobs", "partitions")):
        said = "; ".join(str(e.get("error", e)) if isinstance(e, dict) else str(e) for e in errors)
        raise SlurmQueryError(f"`{' '.join(argv)}` reported errors and no data: {said}")
    return data


def ask_once(argv: list[str], timeout_s: float = TIMEOUT_S, env: Mapping[str, str] | None = None) -> str:
    """One try of a Slurm command, no retry window: for a question the run can do without
    (SlurmQueryError when it fails). ``env``: variables set for it over the process's own."""
    return _run_once(argv, timeout_s) if env is None else _run_with(argv, timeout_s, env)


def version(client: Slurm) -> str:
    """``22.05.8`` etc."""
    return client.run(["sinfo", "--version"]).split()[-1]


def expand_hostlist(client: Slurm, hostlist: str) -> tuple[str, ...]:
    """``node[1-3]`` → node1, node2, node3, through Slurm itself."""
    if not hostlist or hostlist in ("None assigned", "(null)"):
        return ()
    return tuple(client.run(["scontrol", "show", "hostnames", hostlist]).split())

"""Running Slurm's client commands from the login node: every command has a timeout and an argv
list (no shell); one that cannot reach its daemon is tried again for the retry window
(``slurm_retry``). JSON output is preferred to parsing text."""

from __future__ import annotations

import json
import shutil
import subprocess
from typing import Any

from pytest_gpucluster.errors import SlurmQueryError
from pytest_gpucluster.slurm_retry import OUTAGES

TIMEOUT_S = 30.0


def run(argv: list[str], timeout_s: float = TIMEOUT_S) -> str:
    """Run a Slurm client command; its stdout, or SlurmQueryError naming the command. A failure
    that says the daemon could not be reached is tried again until the daemon has not answered
    for the retry window (``slurm_retry``), then raises ``DaemonUnreachable``."""
    return OUTAGES.attempt(argv[0], lambda: _run_once(argv, timeout_s))


def _run_once(argv: list[str], timeout_s: float) -> str:
    if shutil.which(argv[0]) is None:
        raise SlurmQueryError(f"`{argv[0]}` is not on PATH; is slurm-client installed on this login node?")
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, check=False)
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


def run_json(argv: list[str], timeout_s: float = TIMEOUT_S) -> dict[str, Any]:
    """Run a command with ``--json`` output and parse it. A listing that carries only errors (what
    ``sinfo --json`` prints, exiting 0, while slurmctld is down) is no answer: retried as a
    command that could not reach its daemon."""
    return OUTAGES.attempt(argv[0], lambda: _parse_json(argv, _run_once(argv, timeout_s)))


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


def ask_once(argv: list[str], timeout_s: float = TIMEOUT_S) -> str:
    """One try of a Slurm command, no retry window: for a question the run can do without
    (SlurmQueryError when it fails)."""
    return _run_once(argv, timeout_s)


def answers(daemon: str) -> bool:
    """One try, no retry: whether ``daemon`` (``slurmctld``, ``slurmdbd``) answers now."""
    argv = ["sacct", "-X", "-n", "-j", "1"] if daemon == "slurmdbd" else ["scontrol", "ping"]
    try:
        _run_once(argv, TIMEOUT_S)
    except SlurmQueryError:
        return False
    OUTAGES.answered(daemon)
    return True


def version() -> str:
    """``22.05.8`` etc."""
    return run(["sinfo", "--version"]).split()[-1]


def expand_hostlist(hostlist: str) -> tuple[str, ...]:
    """``node[1-3]`` → node1, node2, node3, through Slurm itself."""
    if not hostlist or hostlist in ("None assigned", "(null)"):
        return ()
    return tuple(run(["scontrol", "show", "hostnames", hostlist]).split())

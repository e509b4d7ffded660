"""Questions the login node asks Slurm. Every command has a timeout and an argv list (no shell);
JSON output is preferred to parsing text.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from dataclasses import dataclass
from typing import Any

from pytest_gpucluster.errors import SlurmQueryError

TIMEOUT_S = 30.0


def run(argv: list[str], timeout_s: float = TIMEOUT_S) -> str:
    """Run a Slurm client command; its stdout, or SlurmQueryError naming the command."""
    if shutil.which(argv[0]) is None:
        raise SlurmQueryError(f"`{argv[0]}` is not on PATH; is slurm-client installed on this login node?")
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        raise SlurmQueryError(f"`{' '.join(argv)}` did not answer within {timeout_s:.0f} s.") from None
    if proc.returncode != 0:
        err = (proc.stderr or proc.stdout).strip().splitlines()
        raise SlurmQueryError(f"`{' '.join(argv)}` exited {proc.returncode}: {err[-1] if err else 'no output'}")
    return proc.stdout


def run_json(argv: list[str], timeout_s: float = TIMEOUT_S) -> dict[str, Any]:
    """Run a command with ``--json`` output and parse it."""
    out = run(argv, timeout_s)
    try:
        data: dict[str, Any] = json.loads(out)
    except json.JSONDecodeError as exc:
        raise SlurmQueryError(f"`{' '.join(argv)}` printed no valid JSON ({exc}).") from None
    return data


def version() -> str:
    """``22.05.8`` etc."""
    return run(["sinfo", "--version"]).split()[-1]


def expand_hostlist(hostlist: str) -> tuple[str, ...]:
    """``node[1-3]`` → node1, node2, node3, through Slurm itself."""
    if not hostlist or hostlist in ("None assigned", "(null)"):
        return ()
    return tuple(run(["scontrol", "show", "hostnames", hostlist]).split())


def job_nodes(job_id: str) -> tuple[str, ...]:
    """The nodes a job ran or runs on, from accounting."""
    out = run(["sacct", "-X", "-n", "-P", "-j", job_id, "-o", "NodeList"])
    lines = [line.strip() for line in out.splitlines() if line.strip()]
    return expand_hostlist(lines[0]) if lines else ()


def pending_reason(job_id: str) -> str:
    """Slurm's reason a job still waits, e.g. ``ReqNodeNotAvail``; empty when unknown."""
    out = run(["squeue", "-h", "-j", job_id, "-o", "%r"])
    return out.strip()


def _text(value: Any) -> str:
    if isinstance(value, list):
        return ",".join(str(v) for v in value)
    return "" if value is None else str(value)


@dataclass(frozen=True)
class NodeInfo:
    """One node as ``scontrol show nodes --json`` describes it."""

    name: str
    state: str  # e.g. "IDLE", "MIXED", "DOWN+NOT_RESPONDING", "IDLE+DRAIN"
    reason: str
    partitions: tuple[str, ...]
    gres: str
    cpus: int
    real_memory_mb: int

    @property
    def usable(self) -> bool:
        """Idle, mixed or allocated, and not draining, down or failing."""
        parts = set(self.state.upper().replace("+", " ").split())
        bad = {"DOWN", "DRAIN", "DRAINED", "DRAINING", "FAIL", "FAILING", "NOT_RESPONDING",
               "MAINTENANCE", "REBOOT_REQUESTED", "INVALID_REG", "FUTURE", "UNKNOWN"}  # fmt: skip
        good = {"IDLE", "MIXED", "ALLOCATED", "COMPLETING"}
        return bool(parts & good) and not parts & bad

    @property
    def gpus(self) -> int:
        """GPU count from the GRES string (``gpu:4``, ``gpu:h100:8(S:0-1)``)."""
        total = 0
        for item in self.gres.split(","):
            fields = item.split("(")[0].split(":")
            if fields[0] == "gpu" and fields[-1].isdigit():
                total += int(fields[-1])
        return total


def parse_nodes(data: dict[str, Any]) -> list[NodeInfo]:
    """Nodes from ``scontrol show nodes --json`` (Slurm 22.05 and later)."""
    nodes = []
    for raw in data.get("nodes", []):
        state = raw.get("state", "")
        flags = raw.get("state_flags", [])
        state_text = "+".join([_text(state).upper(), *[str(f).upper() for f in flags]]).strip("+")
        nodes.append(
            NodeInfo(
                name=str(raw.get("name", "")),
                state=state_text,
                reason=_text(raw.get("reason", "")),
                partitions=tuple(raw.get("partitions", []) or []),
                gres=_text(raw.get("gres", "")),
                cpus=int(raw.get("cpus", 0) or 0),
                real_memory_mb=int(raw.get("real_memory", 0) or 0),
            )
        )
    return nodes


def nodes() -> list[NodeInfo]:
    """Every node the controller knows."""
    return parse_nodes(run_json(["scontrol", "show", "nodes", "--json"]))


def partition_nodes(partition: str | None) -> list[NodeInfo]:
    """Nodes of ``partition`` (all nodes when None), sorted by name."""
    return sorted((n for n in nodes() if partition is None or partition in n.partitions), key=lambda n: n.name)


def cancel_by_name_prefix(prefix: str) -> list[str]:
    """Cancel this user's jobs whose name starts with ``prefix``; returns their ids."""
    out = run(["squeue", "--me", "-h", "-o", "%i|%j"])
    rows = [line.split("|", 1) for line in out.splitlines() if "|" in line]
    ids = [job_id for job_id, name in rows if name.startswith(prefix)]
    if ids:
        run(["scancel", *ids])
    return ids

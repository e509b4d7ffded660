"""The cluster's nodes as Slurm reports them (``sinfo --json`` or ``scontrol --json show nodes``),
those lost, and draining one."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from pytest_gpucluster.slurm.commands import TIMEOUT_S, Slurm
from pytest_gpucluster.verdict.ranges import hostlist


def _text(value: Any) -> str:
    if isinstance(value, list):
        return ",".join(str(v) for v in value)
    return "" if value is None else str(value)


@dataclass(frozen=True)
class NodeInfo:
    """One node as Slurm's JSON (``sinfo --json`` / ``scontrol --json show nodes``) describes it."""

    name: str
    state: str  # e.g. "IDLE", "MIXED", "DOWN+NOT_RESPONDING", "IDLE+DRAIN"
    reason: str
    partitions: tuple[str, ...]
    gres: str
    cpus: int
    real_memory_mb: int
    features: tuple[str, ...] = ()  # the node's available features (``--constraint`` picks by them)

    @property
    def usable(self) -> bool:
        """Idle, mixed or allocated, and not draining, down or failing."""
        return self.usable_in(reservation=False)

    def usable_in(self, *, reservation: bool) -> bool:
        """``usable``, for a job of a reservation that holds the node (``reservation``): there a
        MAINTENANCE node, the state a ``flags=maint`` reservation gives its nodes, takes the job."""
        parts = set(self.state.upper().replace("+", " ").split())
        if reservation:
            parts.discard("MAINTENANCE")
        bad = {
            "DOWN",
            "DRAIN",
            "DRAINED",
            "DRAINING",
            "FAIL",
            "FAILING",
            "NOT_RESPONDING",
            "MAINTENANCE",
            "REBOOT_REQUESTED",
            "INVALID_REG",
            "FUTURE",
            "UNKNOWN",
        }
        good = {"IDLE", "MIXED", "ALLOCATED", "COMPLETING"}
        return bool(parts & good) and not parts & bad

    @property
    def said(self) -> str:
        """Slurm's state and reason as one phrase: ``"IDLE+DRAIN (bad DIMM)"``."""
        return self.state + (f" ({self.reason})" if self.reason else "")

    @property
    def gpus(self) -> int:
        """GPU count from the GRES string (``gpu:4``, ``gpu:h100:8(S:0-1)``)."""
        total = 0
        for item in self.gres.split(","):
            fields = item.split("(")[0].split(":")
            if fields[0] == "gpu" and fields[-1].isdigit():
                total += int(fields[-1])
        return total


def number(value: Any) -> int:
    """An integer field of Slurm's JSON: a plain number, or ``{"set": true, "number": 4}``
    (Slurm 23.11 and later)."""
    if isinstance(value, dict):
        value = value.get("number", 0) if value.get("set", True) else 0
    try:
        return int(value or 0)
    except (TypeError, ValueError):
        return 0


def parse_nodes(data: dict[str, Any]) -> list[NodeInfo]:
    """Nodes from ``sinfo --json`` (Slurm 22.05: ``state`` a word plus ``state_flags``) or
    ``scontrol --json show nodes`` (23.02 and later: ``state`` a list of words)."""
    nodes = []
    for raw in data.get("nodes", []):
        state = raw.get("state", "")
        words = [str(w).upper() for w in state] if isinstance(state, list) else [_text(state).upper()]
        words += [str(f).upper() for f in raw.get("state_flags", []) or [] if str(f).upper() not in words]
        nodes.append(
            NodeInfo(
                name=str(raw.get("name", "")),
                state="+".join(w for w in words if w),
                reason=_text(raw.get("reason", "")),
                partitions=tuple(raw.get("partitions", []) or []),
                gres=_text(raw.get("gres", "")),
                cpus=number(raw.get("cpus")),
                real_memory_mb=number(raw.get("real_memory")),
                features=tuple(f for f in _text(raw.get("features", "")).split(",") if f),
            )
        )
    return nodes


def nodes(
    client: Slurm, names: Sequence[str] = (), *, timeout_s: float = TIMEOUT_S, retry: bool = True
) -> list[NodeInfo]:
    """The nodes ``names`` as the controller knows them; every node when empty. Asked through the
    one command that lists nodes on this Slurm, learned from the first answer and kept on
    ``client`` (``Slurm.node_source``): Slurm 22.05's scontrol has no ``--json``, and its
    ``sinfo --json`` lists every node, ignoring any filter (sinfo(1)); from 23.02 ``sinfo --json``
    groups nodes instead, and ``scontrol --json show nodes HOSTLIST`` lists the named nodes. Once
    learned, only that command is asked: no second full listing of a large cluster on every read.
    ``timeout_s`` and ``retry`` bound each command (``Slurm.run_json``)."""
    with client.lock:
        source = client.node_source
    if source == "scontrol":
        data = client.run_json(scontrol_nodes_argv(names), timeout_s, retry=retry)
    else:
        data = client.run_json(["sinfo", "--json"], timeout_s, retry=retry)
        if "nodes" in data:
            source = "sinfo"
        else:
            data = client.run_json(scontrol_nodes_argv(names), timeout_s, retry=retry)
            source = "scontrol"
    with client.lock:
        client.node_source = source
    found = parse_nodes(data)
    wanted = set(names)
    return [n for n in found if n.name in wanted] if wanted else found


def scontrol_nodes_argv(names: Sequence[str]) -> list[str]:
    """``scontrol --json show nodes [HOSTLIST]``: ``names`` as one Slurm hostlist, all nodes when
    empty."""
    return ["scontrol", "--json", "show", "nodes", *([hostlist(names)] if names else [])]


def partition_nodes(
    client: Slurm, partition: str | None, *, timeout_s: float = TIMEOUT_S, retry: bool = True
) -> list[NodeInfo]:
    """Nodes of ``partition`` (all nodes when None), sorted by name; ``timeout_s`` and ``retry`` as
    for ``nodes``."""
    found = nodes(client, timeout_s=timeout_s, retry=retry)
    return sorted((n for n in found if partition is None or partition in n.partitions), key=lambda n: n.name)


_LOST = {"DOWN", "FAIL", "FAILING", "NOT_RESPONDING", "POWERED_DOWN", "POWERING_DOWN", "UNKNOWN"}


def nodes_where(found: Iterable[NodeInfo], names: Iterable[str], bad: Callable[[NodeInfo], bool]) -> dict[str, str]:
    """Of ``names``, those whose entry in ``found`` is ``bad``, and those Slurm no longer lists
    at all: name → ``"STATE (reason)"`` or ``"not known to slurmctld"``."""
    by_name = {n.name: n for n in found}
    out: dict[str, str] = {}
    for name in names:
        node = by_name.get(name)
        if node is None:
            out[name] = "not known to slurmctld"
        elif bad(node):
            out[name] = node.said
    return out


def lost_nodes(found: list[NodeInfo], names: tuple[str, ...]) -> dict[str, str]:
    """Of ``names``, the nodes in ``found`` that are down, failing or not responding (a job on
    them is lost even if Slurm still calls it RUNNING), or no longer listed."""
    return nodes_where(found, names, lambda n: bool(set(n.state.upper().split("+")) & _LOST))


DRAIN_REASON_CHARS = 240  # Slurm keeps the reason as one line; long ones only clutter sinfo -R


def drain_reason(check: str, evidence: str) -> str:
    """One line for Slurm's reason field: who drained the node, for which check, and why."""
    text = " ".join(f"pytest-gpucluster: {check}: {evidence}".split())
    return text if len(text) <= DRAIN_REASON_CHARS else text[: DRAIN_REASON_CHARS - 1] + "…"


def drain(client: Slurm, node: str, reason: str) -> None:
    """``scontrol update nodename=NODE state=drain reason=...``; SlurmQueryError when refused.
    The reason travels as one argument: nothing goes through a shell."""
    client.run(["scontrol", "update", f"nodename={node}", "state=drain", f"reason={reason}"])

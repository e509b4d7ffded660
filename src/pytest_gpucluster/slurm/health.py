"""Slurm's own health, as the Slurm health checks judge it: the controller, the partitions, the
nodes' states and resources, accounting.

Each problem is a finding of what it is about: slurmctld or slurmdbd not answering, and a
partition that is not UP, are the controller's (scope controller: no node is convicted); a
partition the profile names that does not exist is the profile's (scope config); a node that is
not usable is its own; what nodes advertise is Slurm's setup, each node's own where no more than
half of them differ (``checks.places.own_or_setup``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection
from dataclasses import dataclass

from pytest_gpucluster.checks.places import own_or_setup
from pytest_gpucluster.errors import SlurmQueryError
from pytest_gpucluster.slurm.commands import Slurm
from pytest_gpucluster.slurm.node_info import NodeInfo, number
from pytest_gpucluster.verdict import Finding


@dataclass(frozen=True)
class PartitionInfo:
    """One partition as ``scontrol -o show partition`` prints it."""

    name: str
    state: str  # UP, DOWN, DRAIN, INACTIVE
    default: bool
    nodes: str  # Slurm hostlist, e.g. "node[1-2]"
    total_nodes: int
    max_time_s: float | None = None  # MaxTime; None: UNLIMITED (or not given)


def parse_partitions(text: str) -> list[PartitionInfo]:
    """Partitions from ``scontrol -o show partition`` (one ``Key=Value`` line each). Text, not
    JSON: Slurm 22.05 prints partition state in no JSON form."""
    out = []
    for line in text.splitlines():
        fields = dict(item.split("=", 1) for item in line.split() if "=" in item)
        if "PartitionName" not in fields:
            continue
        out.append(
            PartitionInfo(
                name=fields["PartitionName"],
                state=fields.get("State", "UNKNOWN").upper(),
                default=fields.get("Default", "NO").upper() == "YES",
                nodes=fields.get("Nodes", ""),
                total_nodes=number(fields.get("TotalNodes")),
                max_time_s=slurm_minutes(fields.get("MaxTime", "UNLIMITED")),
            )
        )
    return out


def slurm_minutes(text: str) -> float | None:
    """A Slurm time limit (``UNLIMITED``, ``minutes``, ``minutes:seconds``, ``hours:minutes:seconds``,
    ``days-hours[:minutes[:seconds]]``) in seconds; None for unlimited or unreadable."""
    text = text.strip()
    if not text or text.upper() in ("UNLIMITED", "INFINITE", "NONE"):
        return None
    days, _, rest = text.rpartition("-")
    try:
        parts = [int(p) for p in rest.split(":")]
        whole_days = int(days) if days else 0
    except ValueError:
        return None
    if days:  # days-hours[:minutes[:seconds]]
        h, m, s = [*parts, 0, 0][:3]
    elif len(parts) == 3:
        h, m, s = parts
    elif len(parts) == 2:
        h, m, s = 0, parts[0], parts[1]
    else:
        h, m, s = 0, parts[0], 0
    return float(((whole_days * 24 + h) * 60 + m) * 60 + s)


def partitions(client: Slurm) -> list[PartitionInfo]:
    """Every partition the controller knows."""
    return parse_partitions(client.run(["scontrol", "-o", "show", "partition"]))


def _controller(text: str) -> Finding:
    return Finding.outside("controller", text)


def controller_findings(client: Slurm) -> list[Finding]:
    """Empty when every configured slurmctld answers ``scontrol ping`` with UP; else failures of
    the controller."""
    try:
        out = client.run(["scontrol", "ping"])
    except SlurmQueryError as exc:
        return [_controller(str(exc))]
    return parse_ping(out)


def parse_ping(text: str) -> list[Finding]:
    """Failures of the controller in ``scontrol ping`` output (``Slurmctld(primary) at HOST is
    UP``): a backup controller that is DOWN is one too, since failover would not work."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if not lines:
        return [_controller("`scontrol ping` printed nothing; is slurmctld configured (SlurmctldHost)?")]
    return [_controller(f"{line} (scontrol ping)") for line in lines if not line.endswith(" is UP")]


def partition_findings(name: str | None, found: list[PartitionInfo]) -> list[Finding]:
    """The partition ``name`` (the default one when None) exists (else the profile's key
    ``partition`` is at fault) and is UP (else the controller's state is)."""
    if name is None:
        defaults = [p for p in found if p.default]
        if not defaults:
            text = "no default partition and the profile names none; set partition in the profile"
            return [Finding.outside("config", text, setting="partition")]
        chosen = defaults[0]
    else:
        matches = [p for p in found if p.name == name]
        if not matches:
            known = ", ".join(p.name for p in found) or "none"
            text = f"partition {name!r} does not exist (partitions: {known})"
            return [Finding.outside("config", text, setting="partition")]
        chosen = matches[0]
    if chosen.state != "UP":
        return [
            _controller(
                f"partition {chosen.name!r} is {chosen.state}, not UP (scontrol update partitionname="
                f"{chosen.name} state=up)"
            )
        ]
    return []


def default_partition(found: list[PartitionInfo]) -> str | None:
    """The name of the partition jobs go to when none is named."""
    return next((p.name for p in found if p.default), None)


def node_state_findings(
    known: list[NodeInfo],
    *,
    partition: str | None,
    expected: int,
    nodelist: tuple[str, ...] = (),
    reserved: Collection[str] = (),
) -> list[Finding]:
    """Every node of the partition (or of ``nodelist``) that is not usable, with its state and
    Slurm's reason (each its own), and a shortfall of usable nodes against ``expected`` (of the
    partition's nodes together: it falls on those not usable). A node of the run's reservation
    (``reserved``) in MAINTENANCE is usable."""
    where = f"partition {partition!r}" if partition else "the cluster"
    members = [n for n in known if partition is None or partition in n.partitions]
    found: list[Finding] = []
    named = list(nodelist)
    if nodelist:
        by_name = {n.name: n for n in members}
        found += [Finding.on_node(name, f"{name}: not in {where}") for name in nodelist if name not in by_name]
        members = [by_name[name] for name in nodelist if name in by_name]
    for n in members:
        if not n.usable_in(reservation=n.name in reserved):
            why = f", reason: {n.reason!r}" if n.reason else ""
            found.append(Finding.on_node(n.name, f"{n.name}: state {n.state}{why}"))
    usable = [n for n in members if n.usable_in(reservation=n.name in reserved)]
    if len(usable) < expected:
        text = f"{where} has {len(usable)} usable node(s) of {expected} expected"
        # The shortfall is on the nodes found unusable (each named above for its own state); a
        # partition with too few nodes and none unusable is the cluster's, on no node.
        listed = {m.name for m in members}
        unusable = [n.name for n in members if n not in usable] + [n for n in named if n not in listed]
        found.append(Finding.across([*named, *(n.name for n in members)], text, culprits=unusable))
    return found


def node_resource_findings(
    known: list[NodeInfo], *, gpus: int | None, min_cpus: int | None = None, min_memory_mb: int | None = None
) -> list[Finding]:
    """Nodes advertising a GRES GPU count other than ``gpus``, fewer CPUs than ``min_cpus`` or
    less RealMemory than ``min_memory_mb`` (each bound skipped when None): each node's own where
    no more than half the nodes advertise it so, else Slurm's setup (the nodes together)."""
    seen: list[tuple[str, str, str]] = []
    for n in known:
        if gpus is not None and n.gpus != gpus:
            seen.append(
                ("gpus", n.name, f"{n.name}: advertises {n.gpus} GPU(s) (Gres={n.gres or 'none'}), expected {gpus}")
            )
        if min_cpus is not None and n.cpus < min_cpus:
            seen.append(("cpus", n.name, f"{n.name}: advertises {n.cpus} CPUs, the profile's jobs need {min_cpus}"))
        if min_memory_mb is not None and n.real_memory_mb < min_memory_mb:
            text = f"{n.name}: advertises RealMemory={n.real_memory_mb} MB, the profile's jobs need {min_memory_mb} MB"
            seen.append(("memory", n.name, text))
    return own_or_setup(seen, [n.name for n in known])


def node_spread(known: list[NodeInfo]) -> list[Finding]:
    """Warnings of the nodes whose CPUs, memory or GRES differ from most of their peers: a
    configuration drift worth a warning (a partition may be mixed on purpose, so not a failure)."""
    if len(known) < 2:
        return []
    shapes = Counter((n.cpus, n.real_memory_mb, n.gpus) for n in known)
    common, _ = shapes.most_common(1)[0]
    return [
        Finding.on_node(
            n.name,
            f"{n.name}: CPUs={n.cpus} RealMemory={n.real_memory_mb} MB GPUs={n.gpus}, most nodes have "
            f"CPUs={common[0]} RealMemory={common[1]} MB GPUs={common[2]}",
            severity="warn",
        )
        for n in known
        if (n.cpus, n.real_memory_mb, n.gpus) != common
    ]


def accounting_findings(client: Slurm) -> list[Finding]:
    """Empty when ``sacct`` answers (slurmdbd reachable); else a failure of the controller:
    without accounting, job ends cannot be told apart and a job that dies without a result would
    be waited on until its time limit."""
    try:
        client.run(["sacct", "-X", "-n", "-P", "-S", "now-1hours", "-o", "JobID"])
    except SlurmQueryError as exc:
        return [_controller(f"{exc} Check slurmdbd and AccountingStorageType in slurm.conf.")]
    return []

"""Slurm's own health, as the Slurm health checks judge it: the controller, the partitions, the
nodes' states and resources, accounting."""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection
from dataclasses import dataclass

from pytest_gpucluster.errors import SlurmQueryError
from pytest_gpucluster.slurm import commands
from pytest_gpucluster.slurm.node_info import NodeInfo, number


@dataclass(frozen=True)
class PartitionInfo:
    """One partition as ``scontrol -o show partition`` prints it."""

    name: str
    state: str  # UP, DOWN, DRAIN, INACTIVE
    default: bool
    nodes: str  # Slurm hostlist, e.g. "node[1-2]"
    total_nodes: int


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
            )
        )
    return out


def partitions() -> list[PartitionInfo]:
    """Every partition the controller knows."""
    return parse_partitions(commands.run(["scontrol", "-o", "show", "partition"]))


def controller_problems() -> list[str]:
    """Empty when every configured slurmctld answers ``scontrol ping`` with UP."""
    try:
        out = commands.run(["scontrol", "ping"])
    except SlurmQueryError as exc:
        return [str(exc)]
    return parse_ping(out)


def parse_ping(text: str) -> list[str]:
    """Problems in ``scontrol ping`` output (``Slurmctld(primary) at HOST is UP``): a backup
    controller that is DOWN is a problem too, since failover would not work."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if not lines:
        return ["`scontrol ping` printed nothing; is slurmctld configured (SlurmctldHost)?"]
    return [f"{line} (scontrol ping)" for line in lines if not line.endswith(" is UP")]


def partition_problems(name: str | None, found: list[PartitionInfo]) -> list[str]:
    """The partition ``name`` (the default one when None) exists and is UP."""
    if name is None:
        defaults = [p for p in found if p.default]
        if not defaults:
            return ["no default partition and the profile names none; set partition in the profile"]
        chosen = defaults[0]
    else:
        matches = [p for p in found if p.name == name]
        if not matches:
            known = ", ".join(p.name for p in found) or "none"
            return [f"partition {name!r} does not exist (partitions: {known})"]
        chosen = matches[0]
    if chosen.state != "UP":
        return [
            f"partition {chosen.name!r} is {chosen.state}, not UP (scontrol update partitionname="
            f"{chosen.name} state=up)"
        ]
    return []


def default_partition(found: list[PartitionInfo]) -> str | None:
    """The name of the partition jobs go to when none is named."""
    return next((p.name for p in found if p.default), None)


def node_state_problems(
    known: list[NodeInfo],
    *,
    partition: str | None,
    expected: int,
    nodelist: tuple[str, ...] = (),
    reserved: Collection[str] = (),
) -> list[str]:
    """Every node of the partition (or of ``nodelist``) that is not usable, with its state and
    Slurm's reason, and a shortfall of usable nodes against ``expected``. A node of the run's
    reservation (``reserved``) in MAINTENANCE is usable."""
    where = f"partition {partition!r}" if partition else "the cluster"
    members = [n for n in known if partition is None or partition in n.partitions]
    problems: list[str] = []
    if nodelist:
        by_name = {n.name: n for n in members}
        problems += [f"{name}: not in {where}" for name in nodelist if name not in by_name]
        members = [by_name[name] for name in nodelist if name in by_name]
    for n in members:
        if not n.usable_in(reservation=n.name in reserved):
            why = f", reason: {n.reason!r}" if n.reason else ""
            problems.append(f"{n.name}: state {n.state}{why}")
    usable = [n for n in members if n.usable_in(reservation=n.name in reserved)]
    if len(usable) < expected:
        problems.append(f"{where} has {len(usable)} usable node(s) of {expected} expected")
    return problems


def node_resource_problems(
    known: list[NodeInfo], *, gpus: int | None, min_cpus: int | None = None, min_memory_mb: int | None = None
) -> list[str]:
    """Nodes advertising a GRES GPU count other than ``gpus``, fewer CPUs than ``min_cpus`` or
    less RealMemory than ``min_memory_mb`` (each bound skipped when None)."""
    problems = []
    for n in known:
        if gpus is not None and n.gpus != gpus:
            problems.append(f"{n.name}: advertises {n.gpus} GPU(s) (Gres={n.gres or 'none'}), expected {gpus}")
        if min_cpus is not None and n.cpus < min_cpus:
            problems.append(f"{n.name}: advertises {n.cpus} CPUs, the profile's jobs need {min_cpus}")
        if min_memory_mb is not None and n.real_memory_mb < min_memory_mb:
            problems.append(
                f"{n.name}: advertises RealMemory={n.real_memory_mb} MB, the profile's jobs need {min_memory_mb} MB"
            )
    return problems


def node_spread(known: list[NodeInfo]) -> list[str]:
    """Nodes whose CPUs, memory or GRES differ from most of their peers: a configuration drift
    worth a warning (a partition may be mixed on purpose, so it is not a failure)."""
    if len(known) < 2:
        return []
    shapes = Counter((n.cpus, n.real_memory_mb, n.gpus) for n in known)
    common, _ = shapes.most_common(1)[0]
    return [
        f"{n.name}: CPUs={n.cpus} RealMemory={n.real_memory_mb} MB GPUs={n.gpus}, most nodes have "
        f"CPUs={common[0]} RealMemory={common[1]} MB GPUs={common[2]}"
        for n in known
        if (n.cpus, n.real_memory_mb, n.gpus) != common
    ]


def accounting_problems() -> list[str]:
    """Empty when ``sacct`` answers (slurmdbd reachable): without accounting, job ends cannot be
    told apart and a job that dies without a result would be waited on until its time limit."""
    try:
        commands.run(["sacct", "-X", "-n", "-P", "-S", "now-1hours", "-o", "JobID"])
    except SlurmQueryError as exc:
        return [f"{exc} Check slurmdbd and AccountingStorageType in slurm.conf."]
    return []

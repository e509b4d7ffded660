"""Task placement: what each task sees of its rank, node and local id (seed phase 3)."""

from __future__ import annotations

import os
import socket
from collections.abc import Sequence
from dataclasses import dataclass

from pytest_gpucluster.workloads.context import TaskContext


@dataclass(frozen=True)
class Placement:
    """The ids one task reads from its environment."""

    hostname: str
    procid: int
    localid: int
    nodeid: int
    ntasks: int
    source: str  # "slurm" or "local": which variables were read


def _int(*names: str) -> int | None:
    for name in names:
        value = os.environ.get(name)
        if value is not None and value.strip().lstrip("-").isdigit():
            return int(value)
    return None


def report_placement(ctx: TaskContext) -> Placement:
    """Read the ids the scheduler gave this task, straight from the environment, so the check
    tests what Slurm set and not what the launcher believes."""
    source = "slurm" if "SLURM_PROCID" in os.environ else "local"
    procid = _int("SLURM_PROCID", "SUBMITIT_LOCAL_GLOBALID")
    localid = _int("SLURM_LOCALID", "SUBMITIT_LOCAL_LOCALID")
    nodeid = _int("SLURM_NODEID", "SUBMITIT_LOCAL_NODEID")
    ntasks = _int("SLURM_NTASKS", "SUBMITIT_LOCAL_NTASKS")
    return Placement(
        hostname=socket.gethostname(),
        procid=-1 if procid is None else procid,
        localid=-1 if localid is None else localid,
        nodeid=-1 if nodeid is None else nodeid,
        ntasks=-1 if ntasks is None else ntasks,
        source=source,
    )


def placement_problems(placements: Sequence[Placement], nodes: int, tasks_per_node: int) -> list[str]:
    """Every way ``placements`` differs from ``nodes`` × ``tasks_per_node``; empty when exact.

    Checks: every rank 0..N-1 exactly once; each node id holds exactly ``tasks_per_node`` tasks on
    one host with local ids 0..T-1; distinct node ids are distinct hosts.
    """
    problems: list[str] = []
    world = nodes * tasks_per_node
    layout = ", ".join(
        f"rank {p.procid}→{p.hostname} (node {p.nodeid}, local {p.localid})"
        for p in sorted(placements, key=lambda p: p.procid)
    )
    if len(placements) != world:
        problems.append(f"expected {world} tasks, got {len(placements)}")
    ranks = sorted(p.procid for p in placements)
    if ranks != list(range(world)):
        problems.append(f"ranks are {ranks}, expected 0..{world - 1} once each")
    wrong_ntasks = [p for p in placements if p.ntasks != world]
    for p in wrong_ntasks:
        problems.append(f"rank {p.procid} on {p.hostname} was told ntasks={p.ntasks}, expected {world}")
    by_node: dict[int, list[Placement]] = {}
    for p in placements:
        by_node.setdefault(p.nodeid, []).append(p)
    if sorted(by_node) != list(range(nodes)):
        problems.append(f"node ids are {sorted(by_node)}, expected 0..{nodes - 1}")
    host_of_node: dict[int, str] = {}
    for nodeid, group in sorted(by_node.items()):
        hosts = sorted({p.hostname for p in group})
        if len(hosts) != 1:
            problems.append(f"node id {nodeid} spans hosts {hosts}")
        host_of_node[nodeid] = hosts[0]
        if len(group) != tasks_per_node:
            problems.append(
                f"node id {nodeid} ({hosts[0]}) holds {len(group)} tasks, expected {tasks_per_node}"
            )
        local_ids = sorted(p.localid for p in group)
        if local_ids != list(range(len(group))):
            problems.append(f"local ids on {hosts[0]} are {local_ids}, expected 0..{len(group) - 1}")
    hosts = list(host_of_node.values())
    if len(set(hosts)) != len(hosts):
        problems.append(f"distinct node ids share a host: {host_of_node}")
    if problems:
        problems.append(f"layout seen: {layout}")
    return problems

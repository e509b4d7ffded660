"""Task placement, judged on the login node: the ids every task read from its environment
(``workloads.placement.report_placement``) against the job's nodes × tasks per node.
"""

from __future__ import annotations

from collections.abc import Sequence

from pytest_gpucluster.workloads.placement import Placement


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
            problems.append(f"node id {nodeid} ({hosts[0]}) holds {len(group)} tasks, expected {tasks_per_node}")
        local_ids = sorted(p.localid for p in group)
        if local_ids != list(range(len(group))):
            problems.append(f"local ids on {hosts[0]} are {local_ids}, expected 0..{len(group) - 1}")
    hosts = list(host_of_node.values())
    if len(set(hosts)) != len(hosts):
        problems.append(f"distinct node ids share a host: {host_of_node}")
    if problems:
        problems.append(f"layout seen: {layout}")
    return problems

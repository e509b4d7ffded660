"""Task placement, judged on the login node: the ids every task read from its environment
(``workloads.placement.report_placement``) against the job's nodes × tasks per node.

Where tasks land and what ids they read is Slurm's setup, not a node's: each finding names the
job's nodes together, with no culprit.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from pytest_gpucluster.verdict import Finding
from pytest_gpucluster.workloads.placement import Placement

# A layout of more tasks than this is summarised: at 64 nodes × 8 tasks a rank-by-rank listing
# would bury the few ranks that are wrong.
SHOWN = 16


def _few(items: Sequence[object], limit: int = 8) -> str:
    """``items`` joined, the first ``limit`` of them and how many more."""
    shown = ", ".join(str(i) for i in items[:limit])
    return shown + (f", … ({len(items) - limit} more)" if len(items) > limit else "")


def placement_findings(
    placements: Sequence[Placement], nodes: int, tasks_per_node: int, *, on: Sequence[str] = ()
) -> list[Finding]:
    """Every way ``placements`` differs from ``nodes`` × ``tasks_per_node``, each a finding of
    ``on`` (the Slurm nodes the job's tasks ran on) together; empty when exact."""
    return [Finding.across(on, p) for p in _sentences(placements, nodes, tasks_per_node)]


def _sentences(placements: Sequence[Placement], nodes: int, tasks_per_node: int) -> list[str]:
    """Every way ``placements`` differs from ``nodes`` × ``tasks_per_node``, one sentence each.

    Checks: every rank 0..N-1 exactly once; each node id holds exactly ``tasks_per_node`` tasks on
    one host with local ids 0..T-1; distinct node ids are distinct hosts. Past ``SHOWN`` tasks the
    ranks' problems are grouped and the layout is listed only in part.
    """
    problems: list[str] = []
    world = nodes * tasks_per_node
    ordered = sorted(placements, key=lambda p: p.procid)
    if len(placements) != world:
        problems.append(f"expected {world} tasks, got {len(placements)}")
    ranks = sorted(p.procid for p in placements)
    if ranks != list(range(world)):
        if len(ranks) <= SHOWN:
            problems.append(f"ranks are {ranks}, expected 0..{world - 1} once each")
        else:
            counts = Counter(ranks)
            missing = [r for r in range(world) if r not in counts]
            repeated = [r for r, n in sorted(counts.items()) if n > 1]
            outside = [r for r in sorted(counts) if not 0 <= r < world]
            found = [
                f"{what} {_few(rs)}"
                for what, rs in (("missing", missing), ("repeated", repeated), ("out of range", outside))
                if rs
            ]
            problems.append(f"ranks are not 0..{world - 1} once each: {'; '.join(found)}")
    wrong_ntasks = [p for p in ordered if p.ntasks != world]
    if len(wrong_ntasks) <= 4:
        for p in wrong_ntasks:
            problems.append(f"rank {p.procid} on {p.hostname} was told ntasks={p.ntasks}, expected {world}")
    else:
        told = sorted({p.ntasks for p in wrong_ntasks})
        problems.append(
            f"{len(wrong_ntasks)} ranks were told ntasks={' or '.join(map(str, told))}, expected {world} "
            f"(ranks {_few([p.procid for p in wrong_ntasks])})"
        )
    by_node: dict[int, list[Placement]] = {}
    for p in placements:
        by_node.setdefault(p.nodeid, []).append(p)
    if sorted(by_node) != list(range(nodes)):
        problems.append(f"node ids are {_few(sorted(by_node), SHOWN)}, expected 0..{nodes - 1}")
    host_of_node: dict[int, str] = {}
    named: set[int] = set()  # node ids a problem names: their tasks lead the layout
    for nodeid, group in sorted(by_node.items()):
        before = len(problems)
        hosts = sorted({p.hostname for p in group})
        if len(hosts) != 1:
            problems.append(f"node id {nodeid} spans hosts {hosts}")
        host_of_node[nodeid] = hosts[0]
        if len(group) != tasks_per_node:
            problems.append(f"node id {nodeid} ({hosts[0]}) holds {len(group)} tasks, expected {tasks_per_node}")
        local_ids = sorted(p.localid for p in group)
        if local_ids != list(range(len(group))):
            problems.append(f"local ids on {hosts[0]} are {local_ids}, expected 0..{len(group) - 1}")
        if len(problems) > before:
            named.add(nodeid)
    hosts = list(host_of_node.values())
    if len(set(hosts)) != len(hosts):
        shared = {h: [n for n, hn in host_of_node.items() if hn == h] for h in sorted(set(hosts)) if hosts.count(h) > 1}
        problems.append(
            f"distinct node ids share a host: {host_of_node}"
            if len(host_of_node) <= SHOWN
            else "distinct node ids share a host: "
            + "; ".join(f"{h} holds node ids {_few(ns)}" for h, ns in shared.items())
        )
    if problems:
        first = [p for p in ordered if p.nodeid in named] + [p for p in ordered if p.nodeid not in named]
        layout = ", ".join(f"rank {p.procid}→{p.hostname} (node {p.nodeid}, local {p.localid})" for p in first[:SHOWN])
        more = f", … ({len(first) - SHOWN} more)" if len(first) > SHOWN else ""
        problems.append(f"layout seen: {layout}{more}")
    return problems

"""What is slow, named as what it is, from the busbw of every group of the across-node rounds.

The rounds (``plan/rounds.py``) measure each node inside its leaf and against every other leaf, so
each kind of fault leaves its own pattern of slow groups:

- **a node**: slow in every group it is in, and in at least one of them every other member is
  cleared (fast in some group);
- **a leaf**: every group inside it slow, not all of them for a node already named; or every one
  of its nodes named as above (the switch slows everything through it);
- **a leaf's uplinks**: every group between it and two or more other leaves slow, those inside it
  fast;
- **the link between two leaves**: slow groups spanning that pair of leaves that nothing above
  explains (each leaf is fast inside and with the others).

Slow groups that none of these explains are kept as unexplained; a whole-cluster group slow while
every smaller group is fast is a fault that needs the whole fabric loaded. Pure: plain data in,
typed results out.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

from pytest_gpucluster.plan.rounds import Group, RoundPlan

Kind = Literal["node", "leaf", "uplinks", "link"]


@dataclass(frozen=True)
class Culprit:
    """One thing named slow, the nodes it slows and the groups that show it."""

    kind: Kind
    name: str  # a node, a leaf, or "leafA–leafB" for a link
    nodes: tuple[str, ...]
    evidence: tuple[Group, ...]
    rounds: tuple[int, ...]  # 1-based numbers of the rounds its evidence ran in
    leaves: tuple[str, ...] = ()  # the switches it names: a leaf, or a link's two leaves; none for a node

    def sentence(self) -> str:
        where = _rounds(self.rounds)
        slow = len(self.evidence)
        if self.kind == "node":
            return f"node {self.name}: slow in all {slow} of its groups ({where}), beside nodes fast elsewhere"
        if self.kind == "leaf":
            return f"leaf {self.name} ({len(self.nodes)} nodes): slow, {slow} of its groups slow ({where})"
        if self.kind == "uplinks":
            return (
                f"the uplinks of leaf {self.name}: every group between it and other leaves slow ({where}), "
                "the groups inside it fast"
            )
        a, b = self.leaves
        return (
            f"the path between leaves {a} and {b}: {slow} group(s) spanning the two slow ({where}), "
            "each leaf fast elsewhere"
        )


@dataclass(frozen=True)
class Localisation:
    """What the rounds' results name, and what they leave open."""

    culprits: tuple[Culprit, ...]
    unexplained: tuple[Group, ...]  # slow groups no culprit accounts for
    unmeasured: tuple[Group, ...]  # groups of the plan with no result
    whole_cluster_only: bool  # the whole cluster slow, every smaller group fast

    def named(self, kind: Kind) -> tuple[str, ...]:
        return tuple(c.name for c in self.culprits if c.kind == kind)


def localise(plan: RoundPlan, busbw: Mapping[Group, float], floor: float) -> Localisation:
    """Name what is slow: a group whose busbw is below ``floor`` (GB/s) is slow."""
    round_of = {g: i for i, r in enumerate(plan.rounds, start=1) for g in r.groups}
    whole = [g for r in plan.stage("whole cluster") for g in r.groups]
    small = [g for r in plan.rounds if r.stage != "whole cluster" for g in r.groups]
    measured = [g for g in small if g in busbw]
    slow = {g for g in measured if busbw[g] < floor}
    unmeasured = tuple(g for g in (*small, *whole) if g not in busbw)
    whole_slow = any(g in busbw and busbw[g] < floor for g in whole)

    groups_of: dict[str, list[Group]] = defaultdict(list)
    for g in measured:
        for node in g.nodes:
            groups_of[node].append(g)
    cleared = {n for g in measured if g not in slow for n in g.nodes}
    bad_nodes = {
        node
        for node, groups in groups_of.items()
        if all(g in slow for g in groups) and any(all(m in cleared for m in g.nodes if m != node) for g in groups)
    }

    def evidence(groups: Iterable[Group]) -> tuple[tuple[Group, ...], tuple[int, ...]]:
        found = tuple(dict.fromkeys(groups))
        return found, tuple(sorted({round_of[g] for g in found}))

    # Each leaf's groups, inside it and across to other leaves, found in one pass.
    inside: dict[str, list[Group]] = {leaf.name: [] for leaf in plan.leaves}
    across: dict[str, list[Group]] = {leaf.name: [] for leaf in plan.leaves}
    for g in measured:
        if len(g.leaves) == 1:
            inside[g.leaves[0]].append(g)
        elif len(g.leaves) == 2:
            for name in g.leaves:
                across[name].append(g)

    culprits: list[Culprit] = []
    explained: set[Group] = set()
    for leaf in plan.leaves:
        own = inside[leaf.name]
        every_node = len(leaf.nodes) > 1 and all(n in bad_nodes for n in leaf.nodes)
        inside_slow = bool(own) and all(g in slow for g in own) and not all(set(g.nodes) & bad_nodes for g in own)
        if every_node or inside_slow:
            bad_nodes -= set(leaf.nodes)
            shown = [g for g in (*own, *across[leaf.name]) if g in slow] if every_node else own
            found, rounds = evidence(sorted(shown, key=lambda g: round_of[g]))
            culprits.append(Culprit("leaf", leaf.name, leaf.nodes, found, rounds, (leaf.name,)))
            explained |= set(found)
    for node in (n for n in plan.nodes if n in bad_nodes):
        found, rounds = evidence(groups_of[node])
        culprits.append(Culprit("node", node, (node,), found, rounds))
        explained |= set(found)

    named = {c.name for c in culprits if c.kind == "leaf"}
    for leaf in plan.leaves:
        if leaf.name in named or len(leaf.nodes) < 2:
            continue
        out = across[leaf.name]
        others = {g.leaves[0] if g.leaves[1] == leaf.name else g.leaves[1] for g in out}
        if len(others) > 1 and all(g in slow for g in out) and not any(g in slow for g in inside[leaf.name]):
            found, rounds = evidence(out)
            culprits.append(Culprit("uplinks", leaf.name, leaf.nodes, found, rounds, (leaf.name,)))
            explained |= set(found)

    pairs: dict[tuple[str, ...], list[Group]] = defaultdict(list)
    for g in measured:
        if len(g.leaves) == 2 and g in slow and g not in explained:
            pairs[g.leaves].append(g)
    nodes_of = {leaf.name: leaf.nodes for leaf in plan.leaves}
    for (a, b), groups in pairs.items():
        found, rounds = evidence(groups)
        culprits.append(Culprit("link", f"{a}–{b}", (*nodes_of[a], *nodes_of[b]), found, rounds, (a, b)))
        explained |= set(found)

    unexplained = tuple(g for g in measured if g in slow and g not in explained)
    return Localisation(tuple(culprits), unexplained, unmeasured, whole_slow and not slow)


def _rounds(numbers: tuple[int, ...]) -> str:
    if len(numbers) == 1:
        return f"round {numbers[0]}"
    return "rounds " + ", ".join(str(n) for n in numbers)

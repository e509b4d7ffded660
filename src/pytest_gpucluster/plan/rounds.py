"""The across-node NCCL rounds of a cluster whose switch tree is known.

Stages, in order; every group of a round runs at once (sub-communicators of one job):
1. **Inside leaves**, one round: in every leaf, neighbouring nodes in pairs; a leaf's odd node
   joins its last pair; a leaf of one node has nothing to pair with and sits this round out.
2. **Between leaves**, one round per round of a round-robin tournament over the leaves (the
   circle method): in each round every leaf meets at most one other leaf, so its uplinks carry
   one leaf pair's traffic, and after ``L - 1`` rounds (``L`` for an odd count) every pair of
   leaves has met once. Two leaves that meet make ``min(|A|, |B|)`` groups, each with one node of
   the smaller leaf; the larger leaf's other nodes join those groups in turn, so every node is
   measured across leaves in every round its leaf plays.
3. **Whole cluster**, one round: one group of every node, the load no smaller group makes.

Without a tree the plan is today's: one group of every node, and a slow result is isolated by
pairing (``checks/pairing.py``). Pure: no pytest, no Slurm.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from pytest_gpucluster.config.topology import Topology

Stage = Literal["inside leaves", "between leaves", "whole cluster"]
STAGES: tuple[Stage, ...] = ("inside leaves", "between leaves", "whole cluster")


@dataclass(frozen=True)
class Group:
    """One communicator of a round: its nodes and the leaves they hang from (none without a tree)."""

    nodes: tuple[str, ...]
    leaves: tuple[str, ...]


@dataclass(frozen=True)
class Round:
    """Groups that run at once; no node, and between leaves no leaf, is in two of them."""

    stage: Stage
    groups: tuple[Group, ...]

    @property
    def nodes(self) -> int:
        return sum(len(g.nodes) for g in self.groups)


@dataclass(frozen=True)
class Leaf:
    """A leaf switch and the tested nodes under it."""

    name: str
    nodes: tuple[str, ...]


@dataclass(frozen=True)
class RoundPlan:
    """The rounds in the order they run; ``leaves`` is empty without a tree."""

    nodes: tuple[str, ...]
    leaves: tuple[Leaf, ...]
    rounds: tuple[Round, ...]
    levels: int = 0  # of the switch tree; 0 without one

    @property
    def has_tree(self) -> bool:
        return self.levels > 0

    def stage(self, stage: Stage) -> tuple[Round, ...]:
        return tuple(r for r in self.rounds if r.stage == stage)

    @property
    def groups(self) -> tuple[Group, ...]:
        return tuple(g for r in self.rounds for g in r.groups)


class UnplacedNodes(ValueError):
    """Tested nodes that no leaf of the tree names: the tree is not this cluster's."""

    def __init__(self, nodes: Sequence[str]) -> None:
        self.nodes = tuple(nodes)
        shown = ", ".join(self.nodes[:5]) + (f" and {len(self.nodes) - 5} more" if len(self.nodes) > 5 else "")
        super().__init__(
            f"{len(self.nodes)} tested node(s) under no leaf of the topology: {shown}; "
            "update the profile's topology_file from `scontrol show topology`"
        )


def plan_rounds(nodes: Sequence[str], topology: Topology | None) -> RoundPlan:
    """The rounds for ``nodes`` (see the module's stages). UnplacedNodes when the tree misses one."""
    nodes = tuple(dict.fromkeys(nodes))
    whole = Round("whole cluster", (Group(nodes, ()),)) if len(nodes) > 1 else None
    if topology is None:
        return RoundPlan(nodes, (), (whole,) if whole else ())
    leaves = _tested_leaves(nodes, topology)
    rounds: list[Round] = []
    inside = tuple(g for leaf in leaves for g in _inside(leaf))
    if inside:
        rounds.append(Round("inside leaves", inside))
    for matches in tournament(len(leaves)):
        groups = tuple(g for i, j in matches for g in _between(leaves[i], leaves[j]))
        rounds.append(Round("between leaves", groups))
    if whole is not None:
        leaf_names = tuple(leaf.name for leaf in leaves)
        rounds.append(Round("whole cluster", (Group(whole.groups[0].nodes, leaf_names),)))
    return RoundPlan(nodes, leaves, tuple(rounds), topology.levels)


def tournament(count: int) -> list[list[tuple[int, int]]]:
    """A round-robin over ``count`` players by the circle method: ``count - 1`` rounds for an
    even count, ``count`` for an odd one (each player sits one round out); every pair meets
    exactly once and nobody plays twice in a round."""
    if count < 2:
        return []
    players: list[int | None] = [*range(count), *([None] if count % 2 else [])]
    size = len(players)
    rounds: list[list[tuple[int, int]]] = []
    for _ in range(size - 1):
        matches = []
        for k in range(size // 2):
            a, b = players[k], players[size - 1 - k]
            if a is not None and b is not None:
                matches.append((min(a, b), max(a, b)))
        rounds.append(matches)
        players = [players[0], players[-1], *players[1:-1]]  # the first stays, the rest turn
    return rounds


def _tested_leaves(nodes: tuple[str, ...], topology: Topology) -> tuple[Leaf, ...]:
    leaf_of = topology.leaf_of()
    unplaced = [n for n in nodes if n not in leaf_of]
    if unplaced:
        raise UnplacedNodes(unplaced)
    tested = set(nodes)
    found = (Leaf(s.name, tuple(n for n in s.nodes if n in tested)) for s in topology.leaves)
    return tuple(leaf for leaf in found if leaf.nodes)


def _inside(leaf: Leaf) -> list[Group]:
    nodes = leaf.nodes
    if len(nodes) < 2:
        return []
    groups = [nodes[i : i + 2] for i in range(0, len(nodes) - 1, 2)]
    if len(nodes) % 2:
        groups[-1] = (*groups[-1], nodes[-1])
    return [Group(g, (leaf.name,)) for g in groups]


def _between(a: Leaf, b: Leaf) -> list[Group]:
    small, large = (a, b) if len(a.nodes) <= len(b.nodes) else (b, a)
    count = len(small.nodes)
    joined: list[list[str]] = [[] for _ in range(count)]
    for i, node in enumerate(large.nodes):
        joined[i % count].append(node)
    names = (a.name, b.name)
    groups = []
    for k, own in enumerate(small.nodes):
        members = [*joined[k], own] if large is a else [own, *joined[k]]
        groups.append(Group(tuple(members), names))
    return groups


def batches(rnd: Round, at_most: int | None) -> tuple[Round, ...]:
    """``rnd``'s groups as jobs of at most ``at_most`` groups (None: the whole round, one job).
    The groups of one leaf, or of one pair of leaves, stay in one job where they fit, so the load
    a leaf pair puts on its uplinks is measured whole; a leaf pair of more groups than ``at_most``
    is split."""
    if at_most is None or len(rnd.groups) <= at_most:
        return (rnd,)
    units: dict[tuple[str, ...], list[Group]] = {}
    for g in rnd.groups:
        units.setdefault(g.leaves, []).append(g)
    jobs: list[list[Group]] = [[]]
    for unit in units.values():
        for start in range(0, len(unit), at_most):
            part = unit[start : start + at_most]
            if len(jobs[-1]) + len(part) > at_most:
                jobs.append([])
            jobs[-1].extend(part)
    return tuple(Round(rnd.stage, tuple(job)) for job in jobs if job)

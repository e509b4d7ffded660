"""What the report shows of the across-node rounds over the switch tree, from each collective's
``rounds`` record (``checks.rounds.RoundsCheck.to_json``) and the recorded node verdicts: what the
rounds named (a node, a leaf, a leaf's uplinks, the path between two leaves); per leaf its nodes
(folded), how many were accepted and its worst busbw inside it and towards other leaves; the
leaf-to-leaf matrix of the lowest busbw (the heatmap); the slowest groups. At a thousand nodes the
page stays one screen: leaves, not nodes, are its rows. Pure: plain data for ``html.rounds_block``
and ``plots.heatmap``; nothing is judged here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pytest_gpucluster.checks.rounds import groups_of
from pytest_gpucluster.report.plots import natural
from pytest_gpucluster.verdict.ranges import hostlist

SLOWEST = 10  # groups listed, slowest first
KINDS = {"node": "node", "leaf": "leaf switch", "uplinks": "a leaf's uplinks", "link": "path between two leaves"}


@dataclass(frozen=True)
class Named:
    """One thing the rounds named, as the report lists it."""

    kind: str
    name: str
    nodes: str  # folded hostlist
    count: int
    rounds: str


@dataclass(frozen=True)
class LeafRow:
    """One leaf of the summary."""

    name: str
    nodes: str  # folded hostlist
    count: int
    accepted: int
    inside: float | None  # the lowest busbw of its groups inside it
    across: float | None  # the lowest busbw of its groups with other leaves
    named: bool  # the leaf, its uplinks or one of its paths was named


@dataclass(frozen=True)
class Slow:
    """One of the slowest groups."""

    busbw: float
    round: int
    stage: str
    leaves: str
    nodes: str  # folded hostlist
    below: bool  # under the fail line


@dataclass(frozen=True)
class Section:
    """One collective's rounds."""

    op: str
    unit: str
    fail_below: float | None
    summary: str
    named: tuple[Named, ...]
    leaves: tuple[LeafRow, ...]
    matrix_labels: tuple[str, ...]
    # [i][j]: lowest busbw between leaves i and j (i == j: inside leaf i), groups of a named node left out
    matrix: tuple[tuple[float | None, ...], ...]
    slowest: tuple[Slow, ...]


def sections(doc: Mapping[str, Any]) -> list[Section]:
    """One section per collective whose across-node test recorded rounds, in the run's order."""
    verdicts = ((doc.get("acceptance") or {}).get("nodes") or {}).get("verdicts") or {}
    accepted = {str(n) for n, v in verdicts.items() if v.get("verdict") == "ACCEPTED"}
    return [section(t["rounds"], accepted) for t in doc.get("tests", []) if t.get("rounds")]


def section(record: Mapping[str, Any], accepted: set[str]) -> Section:
    """The section of one ``rounds`` record; ``accepted``: the nodes whose verdict is ACCEPTED."""
    leaves: dict[str, list[str]] = {str(k): [str(n) for n in v] for k, v in record.get("leaves", {}).items()}
    order = sorted(leaves, key=natural)
    index = {name: i for i, name in enumerate(order)}
    every = groups_of(record)
    groups = [g for g in every if g.busbw is not None]
    # The map shows the switches and links: a group slow for a node the rounds named is left out
    # of it, so a bad node does not paint its leaf's row (the node is listed as named).
    bad_nodes = {str(n) for c in record.get("culprits", []) if c.get("kind") == "node" for n in c.get("nodes", [])}
    cells: dict[tuple[int, int], float] = {}
    inside: dict[str, float] = {}
    across: dict[str, float] = {}
    for g in groups:
        names = list(g.leaves)
        value = float(g.busbw or 0.0)
        if len(names) == 1:
            inside[names[0]] = min(inside.get(names[0], value), value)
            key = (index[names[0]], index[names[0]])
        elif len(names) == 2:
            for name in names:
                across[name] = min(across.get(name, value), value)
            i, j = sorted((index[names[0]], index[names[1]]))
            key = (i, j)
        else:
            continue
        if not bad_nodes.intersection(g.nodes):
            cells[key] = min(cells.get(key, value), value)
    matrix = tuple(tuple(cells.get((min(i, j), max(i, j))) for j in range(len(order))) for i in range(len(order)))
    named = tuple(_named(c) for c in record.get("culprits", []))
    hit = {str(leaf) for c in record.get("culprits", []) for leaf in c.get("leaves", [])}
    rows = tuple(
        LeafRow(
            name,
            hostlist(leaves[name]),
            len(leaves[name]),
            sum(n in accepted for n in leaves[name]),
            inside.get(name),
            across.get(name),
            name in hit,
        )
        for name in order
    )
    line = record.get("fail_below")
    fail_below = float(line) if line is not None else None
    slowest = tuple(
        Slow(
            float(g.busbw or 0.0),
            g.round,
            g.stage,
            "all" if g.stage == "whole cluster" else "–".join(g.leaves),
            hostlist(g.nodes),
            fail_below is not None and float(g.busbw or 0.0) < fail_below,
        )
        for g in sorted(groups, key=lambda g: float(g.busbw or 0.0))[:SLOWEST]
    )
    nodes = sum(len(v) for v in leaves.values())
    rounds = len(record.get("stages", []))
    summary = f"{nodes} nodes under {len(leaves)} leaves, {rounds} rounds, {len(every)} groups; " + (
        f"named: {'; '.join(f'{n.kind} {n.name}' for n in named)}" if named else "nothing named slow"
    )
    return Section(
        str(record.get("op", "")),
        str(record.get("unit", "GB/s")),
        fail_below,
        summary,
        named,
        rows,
        tuple(order),
        matrix,
        slowest,
    )


def _named(c: Mapping[str, Any]) -> Named:
    nodes = [str(n) for n in c.get("nodes", [])]
    rounds = [int(r) for r in c.get("rounds", [])]
    said = ", ".join(str(r) for r in rounds)
    return Named(KINDS.get(str(c.get("kind")), str(c.get("kind"))), str(c["name"]), hostlist(nodes), len(nodes), said)


def value_text(value: float | None, unit: str) -> str:
    """A busbw as the tables show it; "–" where nothing was measured."""
    return "–" if value is None else f"{value:.4g} {unit}"


def matrix_rows(s: Section) -> Sequence[tuple[str, Sequence[float | None]]]:
    """The matrix as (label, row) pairs, for a table where no plot is drawn."""
    return list(zip(s.matrix_labels, s.matrix, strict=True))

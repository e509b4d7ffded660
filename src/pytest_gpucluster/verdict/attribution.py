"""Every test's result put on the nodes its fields name: the placements the node verdicts are
decided from, and the node × check matrix the report shows. Pure: a results document in, frozen
dataclasses out; only fields are read (a test's ``node``, its findings' scope, nodes and culprits,
its measurements' nodes), never a sentence.

The rules, per test:

* a failure convicts its finding's culprits; a failure of several nodes together with no culprit
  names the nodes among them that are bad already (a failure of their own elsewhere, lost, left
  out before any job), and its other nodes are not judged by it; with none such it is the
  cluster's, on no node;
* a per-node check that failed on another node's account leaves its own node not judged;
* a check that was not judged leaves the nodes its findings name not judged (every node where it
  was stopped by something outside them, only the held node where other work held one), else its
  own node, else no node (the run's verdict still says it);
* what passed or warned colours the cells of the nodes it measured.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pytest_gpucluster.outcomes import JUDGED_BAD, UNJUDGED, first_line, reason_of
from pytest_gpucluster.verdict.finding import Finding
from pytest_gpucluster.verdict.findings import worst

CLUSTER_ROW = "(cluster-wide)"
Column = tuple[str, str]


@dataclass(frozen=True)
class Placed:
    """One line of one test on one row of the matrix (a node, or ``CLUSTER_ROW``). ``convicts``:
    a failure of the row's node's own."""

    row: str
    column: Column
    status: str
    line: str
    nodeid: str
    convicts: bool = False


@dataclass(frozen=True)
class Cell:
    """One matrix cell: the worst status met and the lines explaining it."""

    status: str
    lines: tuple[str, ...] = ()


@dataclass(frozen=True)
class Matrix:
    """Rows are nodes (plus a cluster-wide row), columns are (area, test function)."""

    rows: tuple[str, ...]
    columns: tuple[Column, ...]
    cells: Mapping[tuple[str, Column], Cell] = field(default_factory=dict)

    def cell(self, row: str, column: Column) -> Cell:
        """The cell, or an empty one where nothing ran."""
        return self.cells.get((row, column), Cell("none"))

    def to_json(self) -> dict[str, Any]:
        """Plain dict for the results file (``acceptance.matrix``): the report renders it."""
        return {
            "rows": list(self.rows),
            "columns": [list(c) for c in self.columns],
            "cells": [
                {"row": row, "column": list(col), "status": c.status, "lines": list(c.lines)}
                for (row, col), c in self.cells.items()
            ],
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Matrix:
        """The matrix a results file holds (``to_json``)."""
        cells = {
            (str(c["row"]), (str(c["column"][0]), str(c["column"][1]))): Cell(str(c["status"]), tuple(c["lines"]))
            for c in data.get("cells", [])
        }
        columns = tuple((str(a), str(b)) for a, b in data.get("columns", []))
        return cls(tuple(data.get("rows", [])), columns, cells)


def findings_of(test: Mapping[str, Any]) -> list[Finding]:
    """The findings a test record holds."""
    return [Finding.from_json(f) for f in test.get("findings") or []]


def known_nodes(doc: Mapping[str, Any]) -> list[str]:
    """The tested nodes, then those the inventory, the findings and the measurements name."""
    nodes = [str(n) for n in doc.get("nodes", [])]
    nodes += [str(n) for n in doc.get("inventory", {})]
    for t in doc.get("tests", []):
        if t.get("node"):
            nodes.append(str(t["node"]))
        for m in t.get("measurements", []):
            nodes += [str(n) for n in m.get("nodes") or []]
        for f in t.get("findings") or []:
            nodes += [str(n) for n in f.get("nodes") or []]
    return list(dict.fromkeys(nodes))


def bad_already(doc: Mapping[str, Any]) -> set[str]:
    """Nodes with a failure of their own somewhere in the run (a finding that convicts them: of
    the node, or of several nodes with them as its culprits), lost under a job, or left out
    before any job: a failure of several nodes together that names one of them is put on it."""
    env = doc.get("environment", {})
    bad = {*map(str, env.get("lost_nodes") or {}), *map(str, env.get("excluded_nodes") or {})}
    for t in doc.get("tests", []):
        if t.get("verdict") not in JUDGED_BAD:
            continue
        for f in findings_of(t):
            bad.update(f.convicts)
    return bad


def _failure_lines(t: Mapping[str, Any], col: Column, bad: set[str], label: str) -> Iterable[Placed]:
    nodeid = str(t.get("nodeid", ""))
    node = str(t.get("node") or "")
    fails = [f for f in findings_of(t) if f.severity == "fail"]
    if not fails:  # nothing recorded but the failure itself: the check's node, if it has one
        text = first_line(str(t.get("message", ""))) or "failed"
        fails = [Finding.on_node(node, text) if node else Finding.across([], text)]
    convicted: set[str] = set()
    for f in fails:
        line = f"{f.text} ({label})"
        culprits = set(f.convicts) or ({n for n in f.nodes if n in bad} if f.scope == "nodes" else set())
        for n in [n for n in f.nodes if n in culprits] + sorted(culprits - set(f.nodes)):
            yield Placed(n, col, "fail", line, nodeid, convicts=True)
        convicted |= culprits
        if not culprits:
            yield Placed(CLUSTER_ROW, col, "fail", line, nodeid)
    if node and node not in convicted:
        why = ", ".join(sorted(convicted)) or "no single node"
        yield Placed(node, col, "not_judged", f"not judged: failed on account of {why} ({label})", nodeid)
    for m in t.get("measurements", []):  # what passed beside the failure, on its nodes
        if m.get("status") in ("pass", "warn", "xfail"):
            for n in m.get("nodes") or []:
                yield Placed(str(n), col, str(m["status"]), str(m.get("sentence", "")), nodeid)


def _unjudged_lines(t: Mapping[str, Any], col: Column, status: str, label: str) -> Iterable[Placed]:
    nodeid = str(t.get("nodeid", ""))
    node = str(t.get("node") or "")
    reasons = [f for f in findings_of(t) if f.severity == "not_judged"]
    fault = t.get("cluster_fault") or {}
    said = str(fault.get("sentence") or fault.get("what") or "") or reason_of(first_line(str(t.get("message", ""))))
    if status == "interrupted":
        said = "interrupted before it was judged"
    placed = False
    for f in reasons:
        for n in f.nodes:
            placed = True
            yield Placed(n, col, status, f"{label}: not judged: {f.text}", nodeid)
    for m in t.get("measurements", []):
        if m.get("status") == "unjudged":  # measured, with no bound to judge it by
            for n in m.get("nodes") or []:
                placed = True
                yield Placed(str(n), col, status, f"{label}: not judged: {m.get('sentence', '')}", nodeid)
    if not placed:
        yield Placed(node or CLUSTER_ROW, col, status, f"{label}: not judged: {said or 'no reason given'}", nodeid)


def _judged_lines(t: Mapping[str, Any], col: Column, verdict: str, label: str) -> Iterable[Placed]:
    nodeid = str(t.get("nodeid", ""))
    node = str(t.get("node") or "")
    placed = False
    if node:
        placed = True
        yield Placed(node, col, verdict, f"{label}: {verdict}", nodeid)
    for m in t.get("measurements", []):
        status = "not_judged" if m.get("status") == "unjudged" else str(m.get("status", "pass"))
        for n in m.get("nodes") or []:
            placed = True
            yield Placed(str(n), col, status, str(m.get("sentence", "")), nodeid)
    for f in findings_of(t):
        if f.severity == "warn":
            for n in f.nodes:
                placed = True
                yield Placed(n, col, "warn", f.text, nodeid)
    if not placed:
        message = first_line(str(t.get("message", "")))
        yield Placed(CLUSTER_ROW, col, verdict, f"{label}: {verdict}" + (f": {message}" if message else ""), nodeid)


def placements(doc: Mapping[str, Any]) -> list[Placed]:
    """Every test's lines on the rows its fields name (the rules of this module's docstring)."""
    bad = bad_already(doc)
    out: list[Placed] = []
    for t in doc.get("tests", []):
        col = column_of(t)
        verdict = str(t.get("verdict", "not_judged"))
        label = str(t.get("nodeid", "")).split("::")[-1]
        if verdict in JUDGED_BAD:
            out += _failure_lines(t, col, bad, label)
        elif verdict in UNJUDGED:
            out += _unjudged_lines(t, col, verdict, label)
        else:
            out += _judged_lines(t, col, verdict, label)
    return out


def column_of(t: Mapping[str, Any]) -> Column:
    """A test's matrix column: its area and its function's name."""
    return (str(t.get("area", "tests")), str(t.get("name", t.get("nodeid"))))


def matrix(doc: Mapping[str, Any], placed: Sequence[Placed] | None = None) -> Matrix:
    """The node × check matrix of ``placements``: each cell the worst status met and its lines."""
    placed = placements(doc) if placed is None else placed
    columns = list(dict.fromkeys(column_of(t) for t in doc.get("tests", [])))
    collected: dict[tuple[str, Column], list[tuple[str, str]]] = {}
    for p in placed:
        collected.setdefault((p.row, p.column), []).append((p.status, p.line))
    nodes = known_nodes(doc)
    rows = [n for n in nodes if any(key[0] == n for key in collected)] or list(nodes)
    rows += [r for r in dict.fromkeys(key[0] for key in collected) if r not in rows and r != CLUSTER_ROW]
    if any(key[0] == CLUSTER_ROW for key in collected):
        rows.append(CLUSTER_ROW)
    cells = {
        key: Cell(worst(s for s, _ in vals), tuple(dict.fromkeys(line for _, line in vals)))
        for key, vals in collected.items()
    }
    return Matrix(tuple(rows), tuple(columns), cells)

"""Every test's result put on the nodes it names: the node × check matrix the node verdicts are
decided from and the report shows. Pure: a results document in, frozen dataclasses out."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pytest_gpucluster.outcomes import reason_of
from pytest_gpucluster.verdict.findings import SEVERITY, failure_sentences, first_line, measurement_label, worst

CLUSTER_ROW = "(cluster-wide)"


@dataclass(frozen=True)
class Cell:
    """One matrix cell: the worst status met and the lines explaining it."""

    status: str
    lines: tuple[str, ...] = ()


@dataclass(frozen=True)
class Matrix:
    """Rows are nodes (plus a cluster-wide row), columns are (area, test function)."""

    rows: tuple[str, ...]
    columns: tuple[tuple[str, str], ...]
    cells: Mapping[tuple[str, tuple[str, str]], Cell] = field(default_factory=dict)

    def cell(self, row: str, column: tuple[str, str]) -> Cell:
        """The cell, or an empty one where nothing ran."""
        return self.cells.get((row, column), Cell("none"))


def known_nodes(doc: Mapping[str, Any]) -> list[str]:
    """Tested nodes, then nodes named by inventory and by ``node:...`` measurement places."""
    nodes = list(dict.fromkeys(str(n) for n in doc.get("nodes", [])))
    for n in doc.get("inventory", {}):
        if n not in nodes:
            nodes.append(str(n))
    for t in doc.get("tests", []):
        for m in t.get("measurements", []):
            where = str(m.get("where", ""))
            if ":" in where:
                head = where.split(":", 1)[0]
                if head and head not in nodes:
                    nodes.append(head)
    return nodes


def nodes_in(text: str, nodes: Sequence[str]) -> list[str]:
    """Known node names that ``text`` (a ``where``, a parameter id, a problem) names as a whole
    word; ``node1`` does not match inside ``node10``."""
    found = []
    for n in nodes:
        if re.search(rf"(?<![A-Za-z0-9_.\-]){re.escape(n)}(?![A-Za-z0-9_.\-])", text) or text.startswith(n + ":"):
            found.append(n)
    return found


def matrix(doc: Mapping[str, Any]) -> Matrix:
    """Attribute every test's result to nodes: a test parametrised by node (its id names the
    node) colours that node's cell with the test's verdict; each measurement colours the cells
    of the nodes its ``where`` names; problems naming a node colour it red. What cannot be put on
    a node (a failure of a whole-cluster test, a test without node data) goes to the cluster-wide
    row, so nothing is hidden."""
    nodes = known_nodes(doc)
    columns: list[tuple[str, str]] = []
    collected: dict[tuple[str, tuple[str, str]], list[tuple[str, str]]] = {}

    def add(row: str, col: tuple[str, str], status: str, line: str) -> None:
        collected.setdefault((row, col), []).append((status, line))

    for t in doc.get("tests", []):
        col = (str(t.get("area", "tests")), str(t.get("name", t.get("nodeid"))))
        if col not in columns:
            columns.append(col)
        verdict = str(t.get("verdict", "error"))
        label = str(t.get("nodeid", "")).split("::")[-1]
        param_nodes = nodes_in(str(t.get("params", "")), nodes)
        attributed_bad = False
        fault = t.get("cluster_fault") or {}
        if fault:  # stopped from outside the nodes: not judged, on no node's account
            verdict = "skip"
            said = [f"{label}: not judged: {fault.get('sentence') or fault.get('what')}"]
        elif SEVERITY.get(verdict, 0) >= SEVERITY["xpass"]:
            said = [f"{s} ({label})" for s in failure_sentences(t)]
        elif verdict in ("skip", "n/a"):
            said = [f"{label}: {'skipped' if verdict == 'skip' else 'n/a'}: {reason_of(str(t.get('message', '')))}"]
        else:
            said = [f"{label}: {verdict}"]
        for n in param_nodes:
            for line in said:
                add(n, col, verdict, line)
            attributed_bad = attributed_bad or SEVERITY.get(verdict, 0) >= SEVERITY["warn"]
        # A failed check's own node already has its failures above, with the check's label.
        said_on = param_nodes if SEVERITY.get(verdict, 0) >= SEVERITY["xpass"] else []
        for m in t.get("measurements", []):
            status = str(m.get("status", "pass"))
            if status == "unjudged":
                status = "skip"  # no bound to judge it by: the node is not judged in full
            on = nodes_in(str(m.get("where", "")), nodes)
            for n in on:
                if not (n in said_on and status == "fail"):
                    add(n, col, status, str(m.get("sentence", measurement_label(m))))
            if on and SEVERITY.get(status, 0) >= SEVERITY["warn"]:
                attributed_bad = True
        for p in t.get("problems", []):
            for n in nodes_in(str(p), nodes[:]):
                if n not in said_on:
                    add(n, col, "fail", str(p))
                attributed_bad = True
        touched = bool(param_nodes) or any(nodes_in(str(m.get("where", "")), nodes) for m in t.get("measurements", []))
        if not touched or (SEVERITY.get(verdict, 0) >= SEVERITY["warn"] and not attributed_bad):
            line = f"{label}: {verdict}"
            if fault:
                line = said[0]
            elif t.get("message"):
                line += f": {first_line(t['message'])}"
            add(CLUSTER_ROW, col, verdict, line)
    rows = [n for n in nodes if any(key[0] == n for key in collected)] or list(nodes)
    if any(key[0] == CLUSTER_ROW for key in collected):
        rows.append(CLUSTER_ROW)
    cells = {key: Cell(worst(s for s, _ in vals), tuple(line for _, line in vals)) for key, vals in collected.items()}
    return Matrix(tuple(rows), tuple(columns), cells)

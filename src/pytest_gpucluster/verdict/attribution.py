"""Every test's result put on the nodes its fields name: the placements the node verdicts are
decided from, and the node × check matrix the report shows. Pure: the run's typed results (``check.RunRecord``)
in, frozen dataclasses out; only fields are read (a test's ``node``, its findings' scope, nodes and culprits,
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
* what passed or warned colours the cells of the nodes it measured; in a check that was judged,
  a figure no line judged is a warning on its nodes (the check warns that the line is missing);
* a pass against a line that only proves a path (``Verdict.proves_path``) is marked so, and so is a
  node's pass of a check whose every measurement is one: a cell of such passes only proves a path
  (``path_cells``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from pytest_gpucluster.outcomes import JUDGED_BAD, first_line, reason_of
from pytest_gpucluster.outcomes import UNJUDGED as UNJUDGED_OUTCOMES
from pytest_gpucluster.verdict.check import CheckResult, Column, RunRecord
from pytest_gpucluster.verdict.finding import Finding
from pytest_gpucluster.verdict.findings import worst
from pytest_gpucluster.verdict.measurement import UNJUDGED

CLUSTER_ROW = "(cluster-wide)"


@dataclass(frozen=True)
class Placed:
    """One line of one test on one row of the matrix (a node, or ``CLUSTER_ROW``). ``convicts``:
    a failure of the row's node's own; ``path_only``: a pass that only proves a path."""

    row: str
    column: Column
    status: str
    line: str
    nodeid: str
    convicts: bool = False
    path_only: bool = False


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


def known_nodes(run: RunRecord) -> list[str]:
    """The tested nodes, then those the inventory, the findings and the measurements name."""
    nodes = [*run.nodes, *run.inventory]
    for t in run.tests:
        if t.node:
            nodes.append(t.node)
        for v in t.verdicts:
            nodes += v.measurement.nodes
        for f in t.findings:
            nodes += f.nodes
    return list(dict.fromkeys(nodes))


def bad_already(run: RunRecord) -> set[str]:
    """Nodes with a failure of their own somewhere in the run (a finding that convicts them: of
    the node, or of several nodes with them as its culprits), lost under a job, or left out
    before any job: a failure of several nodes together that names one of them is put on it."""
    bad = {*map(str, run.lost), *run.excluded}
    for t in run.tests:
        if t.verdict in JUDGED_BAD:
            for f in t.findings:
                bad.update(f.convicts)
    return bad


def _passed_beside(t: CheckResult) -> Iterable[Placed]:
    for v in t.verdicts:
        if v.status in ("pass", "warn", "xfail"):
            for n in v.measurement.nodes:
                yield Placed(n, t.column, v.status, v.sentence, t.nodeid, path_only=v.proves_path)


def _failure_lines(t: CheckResult, bad: set[str]) -> Iterable[Placed]:
    col, label, node = t.column, t.label, t.node
    fails = list(t.findings_of("fail"))
    if not fails:  # nothing recorded but the failure itself: the check's node, if it has one
        text = first_line(t.message) or "failed"
        fails = [Finding.on_node(node, text) if node else Finding.across([], text)]
    convicted: set[str] = set()
    for f in fails:
        line = f"{f.text} ({label})"
        culprits = set(f.convicts) or ({n for n in f.nodes if n in bad} if f.scope == "nodes" else set())
        for n in [n for n in f.nodes if n in culprits] + sorted(culprits - set(f.nodes)):
            yield Placed(n, col, "fail", line, t.nodeid, convicts=True)
        convicted |= culprits
        if not culprits:
            yield Placed(CLUSTER_ROW, col, "fail", line, t.nodeid)
    if node and node not in convicted:
        why = ", ".join(sorted(convicted)) or "no single node"
        yield Placed(node, col, "not_judged", f"not judged: failed on account of {why} ({label})", t.nodeid)
    yield from _passed_beside(t)  # what passed beside the failure, on its nodes


def _unjudged_lines(t: CheckResult) -> Iterable[Placed]:
    col, label, status = t.column, t.label, t.verdict
    said = t.stopped.said if t.stopped is not None else ""
    said = said or reason_of(first_line(t.message))
    if status == "interrupted":
        said = "interrupted before it was judged"
    placed = False
    for f in t.findings_of("not_judged"):
        for n in f.nodes:
            placed = True
            yield Placed(n, col, status, f"{label}: not judged: {f.text}", t.nodeid)
    for v in t.of_status(UNJUDGED):  # measured, with no bound to judge it by
        for n in v.measurement.nodes:
            placed = True
            yield Placed(n, col, status, f"{label}: not judged: {v.sentence}", t.nodeid)
    if not placed:
        yield Placed(t.node or CLUSTER_ROW, col, status, f"{label}: not judged: {said or 'no reason given'}", t.nodeid)


def _judged_lines(t: CheckResult) -> Iterable[Placed]:
    col, label, verdict = t.column, t.label, t.verdict
    placed = False
    if t.node:
        placed = True
        path = bool(t.verdicts) and all(v.proves_path for v in t.verdicts)
        yield Placed(t.node, col, verdict, f"{label}: {verdict}", t.nodeid, path_only=path)
    for v in t.verdicts:
        # A figure no line judged, in a check that judged the rest: the check warns that its line
        # is missing (``checks/lines.py``), so the figure's nodes read as warned, not as untested.
        status = "warn" if v.status == UNJUDGED else v.status
        for n in v.measurement.nodes:
            placed = True
            yield Placed(n, col, status, v.sentence, t.nodeid, path_only=v.proves_path)
    for f in t.findings_of("warn"):
        for n in f.nodes:
            placed = True
            yield Placed(n, col, "warn", f.text, t.nodeid)
    if not placed:
        message = first_line(t.message)
        yield Placed(CLUSTER_ROW, col, verdict, f"{label}: {verdict}" + (f": {message}" if message else ""), t.nodeid)


def placements(run: RunRecord) -> list[Placed]:
    """Every test's lines on the rows its fields name (the rules of this module's docstring)."""
    bad = bad_already(run)
    out: list[Placed] = []
    for t in run.tests:
        if t.verdict in JUDGED_BAD:
            out += _failure_lines(t, bad)
        elif t.verdict in UNJUDGED_OUTCOMES:
            out += _unjudged_lines(t)
        else:
            out += _judged_lines(t)
    return out


def matrix(run: RunRecord, placed: Sequence[Placed] | None = None) -> Matrix:
    """The node × check matrix of ``placements``: each cell the worst status met and its lines."""
    placed = placements(run) if placed is None else placed
    columns = list(dict.fromkeys(t.column for t in run.tests))
    collected: dict[tuple[str, Column], list[tuple[str, str]]] = {}
    for p in placed:
        collected.setdefault((p.row, p.column), []).append((p.status, p.line))
    nodes = known_nodes(run)
    rows = [n for n in nodes if any(key[0] == n for key in collected)] or list(nodes)
    rows += [r for r in dict.fromkeys(key[0] for key in collected) if r not in rows and r != CLUSTER_ROW]
    if any(key[0] == CLUSTER_ROW for key in collected):
        rows.append(CLUSTER_ROW)
    cells = {
        key: Cell(worst(s for s, _ in vals), tuple(dict.fromkeys(line for _, line in vals)))
        for key, vals in collected.items()
    }
    return Matrix(tuple(rows), tuple(columns), cells)


def path_cells(run: RunRecord, placed: Sequence[Placed] | None = None) -> frozenset[tuple[str, Column]]:
    """The matrix cells that pass and whose every pass only proves a path: a pass there says the
    path carried the work, not that a speed met its line."""
    placed = placements(run) if placed is None else placed
    collected: dict[tuple[str, Column], list[Placed]] = {}
    for p in placed:
        collected.setdefault((p.row, p.column), []).append(p)
    return frozenset(
        key
        for key, ps in collected.items()
        if worst(p.status for p in ps) == "pass" and all(p.path_only for p in ps if p.status == "pass")
    )

"""Results document → what the acceptance report shows: overall verdict, counts, node × check
matrix, per-test summary cells and readable one-line properties. Pure: plain dicts in, frozen
dataclasses out; no pytest, no HTML.

The verdict rule (also in docs/report.md), over the run's *required set* (``selection.py``):

* REJECTED   a selected check failed, or errored on the cluster (a job failed, a submission was
  refused); an unexpected pass of a strict xfail counts as a failure;
* INCOMPLETE otherwise, when a required check that was selected was skipped, errored before it
  could judge (a fault of the harness), was stopped by a fault outside the nodes (``faults.py``:
  the controller, the shared filesystem, other work in the queue; one reason per fault, its
  sentence first, and the headline names the first), or was not reached (the run was
  interrupted), or when no check passed;
* PARTIAL    otherwise, when the selection (``-k``, ``-m``, ``--deselect``, files or tests named on
  the command line) left required checks out: what ran passed, but it is not the acceptance;
* ACCEPTED   otherwise: every required check ran and passed; warnings are counted and listed.

A check that does not apply to the profile's shape (``n/a``) is neither required nor missing.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from pytest_gpucluster.config.thresholds import origin_of
from pytest_gpucluster.fold import fold, fold_lines
from pytest_gpucluster.outcomes import reason_of
from pytest_gpucluster.ranges import spans as runs_as_text
from pytest_gpucluster.results import PROPERTY

Overall = Literal["ACCEPTED", "REJECTED", "INCOMPLETE", "PARTIAL"]

# Worst first wins when several results meet in one matrix cell.
SEVERITY = {"fail": 7, "error": 7, "xpass": 6, "warn": 5, "skip": 4, "xfail": 3, "pass": 2, "n/a": 1, "none": 0}
CLUSTER_ROW = "(cluster-wide)"


def worst(statuses: Iterable[str]) -> str:
    """The most severe of ``statuses`` ("none" when empty)."""
    return max(statuses, key=lambda s: SEVERITY.get(s, 0), default="none")


def _fmt(value: Any) -> str:
    if not isinstance(value, int | float):
        return str(value)
    v = float(value)
    if 1000 <= abs(v) < 1e7:
        return f"{v:.1f}"
    return f"{v:.4g}"


def describe_threshold(threshold: Mapping[str, Any], unit: str) -> str:
    """``{"fail_below": 320, "warn_below": 340}`` → ``fail < 320 GB/s, warn < 340 GB/s``."""
    parts = []
    for key, sign in (("fail_below", "<"), ("warn_below", "<"), ("fail_above", ">"), ("warn_above", ">")):
        if threshold.get(key) is not None:
            parts.append(f"{key.split('_')[0]} {sign} {_fmt(threshold[key])} {unit}".rstrip())
    if threshold.get("xfail"):
        parts.append(f"expected to fail: {threshold['xfail']}")
    return ", ".join(parts) or "no bound"


SOURCE_LABELS = {
    "reference": "reference",
    "calibration": "calibration",
    "derived": "derived from the fabric",
    "site": "site's choice",
    "missing": "missing from thresholds.toml",  # a measurement kept unjudged: no bound to judge it by
}


def threshold_origin(threshold: Mapping[str, Any]) -> str:
    """What a recorded bound rests on: ``reference``, ``calibration``, ``derived`` or ``site``
    (results written before bounds carried their evidence: told from the location alone)."""
    origin = threshold.get("origin")
    if origin in SOURCE_LABELS:
        return str(origin)
    return origin_of(str(threshold.get("source", "")), str(threshold.get("evidence", "")))


def threshold_source(threshold: Mapping[str, Any]) -> str:
    """The bound's source in words: its kind, then the evidence and where the bound is set, e.g.
    ``calibration: calibrated from 3 run(s) ... (thresholds.toml [thresholds.calibrated-x.compute.memcopy])``."""
    label = SOURCE_LABELS[threshold_origin(threshold)]
    evidence, where = str(threshold.get("evidence", "")), str(threshold.get("source", ""))
    if evidence and where:
        return f"{label}: {evidence} ({where})"
    return f"{label}: {evidence or where}" if (evidence or where) else label


def measurement_label(m: Mapping[str, Any]) -> str:
    """``nccl.all_reduce.intra_node[node1]`` (plus `` detail`` when there is one)."""
    label = str(m.get("metric", "?"))
    if m.get("where"):
        label += f"[{m['where']}]"
    if m.get("detail"):
        label += f" {m['detail']}"
    return label


def measurement_value(m: Mapping[str, Any]) -> str:
    """``354.2 GB/s``."""
    return f"{_fmt(m.get('value'))} {m.get('unit', '')}".rstrip()


def junit_properties(entries: Sequence[Mapping[str, Any]]) -> list[tuple[str, str]]:
    """Readable JUnit XML properties for a test's data entries: one per measurement
    (``nccl.all_reduce.intra_node[node1]`` = ``354.2 GB/s pass (fail < 320 GB/s)``), job and
    problem. Series, environment and inventory stay in the results file only."""
    props: list[tuple[str, str]] = []
    for e in entries:
        kind = e.get("kind")
        if kind == "measurement":
            bounds = describe_threshold(e.get("threshold", {}), str(e.get("unit", "")))
            props.append((measurement_label(e), f"{measurement_value(e)} {e.get('status', '?')} ({bounds})"))
        elif kind == "job":
            props.append((f"{PROPERTY}.job", f"{e.get('job_id')} {e.get('name', '')} {e.get('folder', '')}".strip()))
        elif kind == "problem":
            props.append((f"{PROPERTY}.problem", str(e.get("text", ""))))
    return props


# --------------------------------------------------------------------------- verdict


@dataclass(frozen=True)
class Finding:
    """One line of the failures: what one check found, repeated sentences folded (``fold.py``),
    the check's label after it; ``nodeid`` is the check, for a link to its details."""

    text: str
    count: int
    nodeid: str

    @property
    def line(self) -> str:
        """The text, with ``(×N)`` after it when it stands for more than one sentence."""
        return self.text if self.count == 1 else f"{self.text} (×{self.count})"


@dataclass(frozen=True)
class Acceptance:
    """The run's overall verdict, the reasons for it and the counts behind it."""

    verdict: Overall
    reasons: tuple[str, ...]
    counts: Mapping[str, int]
    headline: str = ""  # "ACCEPTED, 2 warnings", "PARTIAL: 10 selected checks passed; ..."
    warnings: tuple[str, ...] = ()
    not_applicable: tuple[str, ...] = ()  # "<check>: <reason>", one per check that does not apply
    not_selected: tuple[str, ...] = ()
    findings: tuple[Finding, ...] = ()  # the failures of a REJECTED run, one line per check and cause


COUNTED = ("pass", "warn", "fail", "error", "n/a", "skip", "xfail", "xpass")


def test_label(nodeid: str) -> str:
    """``tests/acceptance/test_nccl.py::test_x[node1]`` → ``test_nccl.py::test_x[node1]``."""
    path, sep, rest = str(nodeid).partition("::")
    return f"{path.rsplit('/', 1)[-1]}{sep}{rest}"


def failure_sentences(test: Mapping[str, Any]) -> list[str]:
    """What a failed check found, one sentence each, the culprit (node, GPU, port, job) first:
    its failed measurements' sentences and its problems; else its message's first line."""
    found = [str(m.get("sentence", "")) for m in test.get("measurements", []) if m.get("status") == "fail"]
    found += [str(p) for p in test.get("problems", [])]
    found = [f for f in dict.fromkeys(found) if f]
    if not found:
        found = [first_line(str(test.get("message", ""))) or str(test.get("verdict", "failed"))]
    return found


def findings_of(test: Mapping[str, Any], nodes: Sequence[str] = ()) -> list[Finding]:
    """A failed check's sentences folded (one line per node and cause), its label after each."""
    label = test_label(str(test.get("nodeid")))
    return [
        Finding(f"{f.text} ({label})", f.count, str(test.get("nodeid"))) for f in fold(failure_sentences(test), nodes)
    ]


def _judged_bad(t: Mapping[str, Any]) -> bool:
    verdict = t.get("verdict")
    return verdict == "xpass" or (verdict in ("fail", "error") and not t.get("unjudged"))


def acceptance(doc: Mapping[str, Any]) -> Acceptance:
    """Apply the verdict rule of this module's docstring to a results document."""
    tests = list(doc.get("tests", []))
    by_id = {str(t.get("nodeid")): t for t in tests}
    nodes = known_nodes(doc)
    counts = dict.fromkeys(COUNTED, 0)
    for t in tests:
        counts[t.get("verdict", "error")] = counts.get(t.get("verdict", "error"), 0) + 1
    sel = doc.get("selection") or None
    # The checks of this run that did not apply: the same tests ``counts["n/a"]`` counts, each with
    # the reason known at collection (the selection) or found when it ran.
    known_why = (sel or {}).get("not_applicable", {})
    not_applicable = [
        f"{test_label(str(t.get('nodeid')))}: "
        + str(known_why.get(str(t.get("nodeid"))) or reason_of(str(t.get("message", ""))))
        for t in tests
        if t.get("verdict") == "n/a"
    ]
    warned = tuple(
        dict.fromkeys(
            Finding(f"{f.text} ({test_label(str(t.get('nodeid')))})", f.count, str(t.get("nodeid"))).line
            for t in tests
            if t.get("verdict") == "warn"
            for f in fold(
                dict.fromkeys(
                    list(t.get("warnings", []))
                    + [str(m.get("sentence")) for m in t.get("measurements", []) if m.get("status") == "warn"]
                    or ["warnings"]
                ),
                nodes,
            )
        )
    )

    def made(
        verdict: Overall,
        reasons: Iterable[str],
        headline: str,
        not_selected: Iterable[str] = (),
        found: Iterable[Finding] = (),
    ) -> Acceptance:
        return Acceptance(
            verdict,
            tuple(reasons),
            counts,
            headline,
            warned,
            tuple(not_applicable),
            tuple(not_selected),
            tuple(found),
        )

    faults = fault_reasons(tests)
    bad = [t for t in tests if _judged_bad(t)]
    if bad:
        found = [f for t in bad for f in findings_of(t, nodes)]
        n = len(bad)
        headline = f"REJECTED: {n} check{'s' if n != 1 else ''} failed"
        if faults:  # what stopped the other checks is named in the headline too
            headline += f"; {fault_reasons(tests, short=True)[0]}"
        return made("REJECTED", [*faults, *(f.line for f in found)], headline, found=found)

    reasons: list[str] = list(faults)
    faulted = {str(t.get("nodeid")) for t in tests if t.get("cluster_fault")}
    status = doc.get("status")
    if status != "complete":
        reasons.append(f"the run did not finish (status: {status}); results cover only the checks that ran")
    not_selected: list[str] = []
    if sel is not None:
        skipped_out = set(sel.get("not_selected", []))
        not_selected = [test_label(n) for n in sel.get("not_selected", [])]
        for nodeid in sel.get("required", []):
            if nodeid in skipped_out or nodeid in faulted:
                continue
            t = by_id.get(nodeid)
            reasons += _missing(nodeid, t)
    else:  # a results file without a selection: every check in it is taken as required
        for t in tests:
            if str(t.get("nodeid")) not in faulted:
                reasons += _missing(str(t.get("nodeid")), t)
    narrowed = sel is not None and bool(not_selected or sel.get("named"))
    if counts["pass"] + counts["warn"] == 0 and not narrowed:
        reasons.append("no acceptance check passed")
    if reasons:
        reasons = fold_lines(reasons, nodes)
        n = len(reasons)
        headline = f"INCOMPLETE: {n} reason{'s' if n != 1 else ''} the acceptance is not whole"
        if faults:  # the fault outside the nodes is what a reader must see first
            more = n - 1
            headline = f"INCOMPLETE: {fault_reasons(tests, short=True)[0]}" + (
                f" (and {more} more reason{'s' if more != 1 else ''})" if more else ""
            )
        return made("INCOMPLETE", reasons, headline, not_selected)
    passed = counts["pass"] + counts["warn"]
    w = f", {len(warned)} warning{'s' if len(warned) != 1 else ''}" if warned else ""
    if sel is not None and narrowed:
        parts = [f"{passed} selected check{'s' if passed != 1 else ''} passed{w}"]
        if not_selected:
            parts.append(f"{len(not_selected)} required check{'s' if len(not_selected) != 1 else ''} not selected")
        named = list(sel.get("named", []))
        why = [f"the command line names {', '.join(named)}: checks outside it were not collected"] if named else []
        why += [f"{n}: not selected" for n in not_selected]
        return made("PARTIAL", why, "PARTIAL: " + "; ".join(parts), not_selected)
    return made("ACCEPTED", warned, f"ACCEPTED{w}")


def fault_reasons(tests: Iterable[Mapping[str, Any]], *, short: bool = False) -> list[str]:
    """One line per fault outside the nodes (``faults.py``) that stopped checks, its sentence
    first, then how many checks it kept from being judged: "the Slurm controller (slurmctld)
    stopped answering at 10:14:05 UTC (...) (26 checks not judged: test_a, test_b, test_c and 23
    more)"; ``short``: without naming the checks (for a headline)."""
    stopped: dict[str, list[str]] = {}
    for t in tests:
        fault = t.get("cluster_fault") or {}
        if fault:
            stopped.setdefault(str(fault.get("sentence") or fault.get("what")), []).append(
                test_label(str(t.get("nodeid")))
            )
    out = []
    for sentence, labels in stopped.items():
        count = f"{len(labels)} check{'s' if len(labels) != 1 else ''} not judged"
        shown = ", ".join(labels[:3]) + (f" and {len(labels) - 3} more" if len(labels) > 3 else "")
        out.append(f"{sentence} ({count})" if short else f"{sentence} ({count}: {shown})")
    return out


def _missing(nodeid: str, t: Mapping[str, Any] | None) -> list[str]:
    """Why a required check has no judgement, or nothing when it has one."""
    label = test_label(nodeid)
    if t is None:
        return [f"{label}: not reached (the run ended before it)"]
    verdict = t.get("verdict")
    if verdict == "skip":
        return [f"{label}: skipped: {reason_of(str(t.get('message', ''))) or 'no reason given'}"]
    if verdict in ("fail", "error"):  # only unjudged ones reach here
        return [f"{label}: could not be judged ({t.get('unjudged')}): {first_line(str(t.get('message', '')))}"]
    if verdict in ("interrupted", "unknown"):
        return [f"{label}: interrupted before it was judged"]
    return []


def first_line(text: str) -> str:
    """The first non-empty line of ``text``, without pytest's ``Failed: `` / ``Skipped: `` prefix
    and without this plugin's exception path (``pytest_gpucluster.errors.NodeLostError: ``): the
    sentence after it names the job and the node."""
    for line in str(text).splitlines():
        if line.strip():
            line = re.sub(r"^(Failed|Skipped|XFailed): ", "", line.strip())
            return re.sub(r"^pytest_gpucluster(\.\w+)*\.\w+: ", "", line)
    return ""


# --------------------------------------------------------------------------- per-test cells


@dataclass(frozen=True)
class TestCells:
    """The results-table cells of one test: its worst measurement stands for it."""

    measured: str
    threshold: str  # the bounds, then what they rest on in brackets
    verdict: str
    where: str
    jobs: str
    count: int


def test_cells(test: Mapping[str, Any]) -> TestCells:
    """Cells for one test record: the worst measurement (with the number of others), its bounds,
    the test's verdict, where it was measured and the job ids."""
    ms = list(test.get("measurements", []))
    jobs = ", ".join(str(j) for j in test.get("job_ids", []))
    verdict = str(test.get("verdict", "?"))
    if not ms:
        return TestCells("", "", verdict, _node_param(test), jobs, 0)

    def badness(m: Mapping[str, Any]) -> tuple[int, float]:
        # Among equally judged values, the one closest to (or furthest past) its fail line.
        higher = any(k in m.get("threshold", {}) for k in ("fail_below", "warn_below"))
        value = float(m.get("value") or 0.0)
        return SEVERITY.get(str(m.get("status")), 0), -value if higher else value

    m = max(ms, key=badness)
    extra = f" (worst of {len(ms)})" if len(ms) > 1 else ""
    return TestCells(
        measured=measurement_value(m) + extra,
        threshold=describe_threshold(m.get("threshold", {}), str(m.get("unit", "")))
        + f" [{SOURCE_LABELS[threshold_origin(m.get('threshold', {}))]}]",
        verdict=verdict,
        where=str(m.get("where", "")) or _node_param(test),
        jobs=jobs,
        count=len(ms),
    )


def _node_param(test: Mapping[str, Any]) -> str:
    return str(test.get("params", ""))


# --------------------------------------------------------------------------- node × check matrix


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


@dataclass(frozen=True)
class MatrixRow:
    """One row of the matrix as shown: one node, the cluster-wide row, or several nodes whose every
    check passed (or did not apply), named by their hostlist."""

    label: str
    nodes: tuple[str, ...]

    def cell(self, m: Matrix, column: tuple[str, str]) -> Cell:
        """The row's cell: the node's own, or for a group the worst of its nodes' cells, explained
        as the nodes that had each status (``pass on gpu-[01-60]``)."""
        if len(self.nodes) == 1:
            return m.cell(self.nodes[0], column)
        by_status: dict[str, list[str]] = {}
        for node in self.nodes:
            by_status.setdefault(m.cell(node, column).status, []).append(node)
        lines = tuple(f"{'not run' if s == 'none' else s} on {hostlist(ns)}" for s, ns in by_status.items())
        return Cell(worst(by_status), lines)


def matrix_rows(m: Matrix, max_node_rows: int = 16) -> tuple[MatrixRow, ...]:
    """The rows to show: up to ``max_node_rows`` nodes, a row per node in the matrix's order. Past
    that, the nodes with a failure first, then those with a skip, a warning or an expected failure,
    each in a row of its own, and the nodes where every check passed or did not apply in one row
    named by their hostlist; the cluster-wide row last."""
    nodes = [r for r in m.rows if r != CLUSTER_ROW]
    tail = (MatrixRow(CLUSTER_ROW, (CLUSTER_ROW,)),) if CLUSTER_ROW in m.rows else ()
    if len(nodes) <= max_node_rows:
        return tuple(MatrixRow(n, (n,)) for n in nodes) + tail
    rank = {"fail": 0, "error": 0, "xpass": 0, "skip": 1, "warn": 2, "xfail": 3}
    row_status = {n: worst(m.cell(n, c).status for c in m.columns) for n in nodes}
    marked = sorted((n for n in nodes if row_status[n] in rank), key=lambda n: rank[row_status[n]])
    clean = tuple(n for n in nodes if row_status[n] not in rank)
    if len(clean) > 1:
        group: tuple[MatrixRow, ...] = (MatrixRow(f"{hostlist(clean)} ({len(clean)} nodes)", clean),)
    else:
        group = tuple(MatrixRow(n, (n,)) for n in clean)
    return tuple(MatrixRow(n, (n,)) for n in marked) + group + tail


# --------------------------------------------------------------------------- per-node verdicts


NodeOverall = Literal["ACCEPTED", "REJECTED", "INCOMPLETE", "PARTIAL"]


@dataclass(frozen=True)
class NodeVerdict:
    """One node's verdict and the sentences that decided it."""

    node: str
    verdict: NodeOverall
    reasons: tuple[str, ...] = ()
    checks: tuple[str, ...] = ()  # the checks (test functions) whose results decided a REJECTED or INCOMPLETE


@dataclass(frozen=True)
class Nodes:
    """Every tested node's verdict, what no single node explains, and the one-line summary."""

    verdicts: tuple[NodeVerdict, ...]
    cluster_wide: tuple[str, ...]  # failures no node is named in (a fabric-wide fault, say)
    summary: str  # "1 of 2 nodes accepted; rejected: node2"
    exclude: str  # the rejected nodes as a Slurm hostlist, for sbatch --exclude=

    def to_json(self) -> dict[str, Any]:
        """Plain dict for the results file."""
        return {
            "summary": self.summary,
            "exclude": self.exclude,
            "cluster_wide": list(self.cluster_wide),
            "verdicts": {
                v.node: {"verdict": v.verdict, "reasons": list(v.reasons), "checks": list(v.checks)}
                for v in self.verdicts
            },
        }


def node_verdicts(doc: Mapping[str, Any], run_verdict: str = "") -> Nodes:
    """Per node, from the matrix's attribution: REJECTED when a check failed on it (or the run
    lost it, or Slurm excluded it), INCOMPLETE when a check of it was skipped or failed only
    because of another node the run lost or Slurm excluded (a job spanning both, a comparison
    left with one node), otherwise ACCEPTED (PARTIAL in a partial run: only the selected checks
    speak for it). Failures that name no node are listed apart: they may be the fabric's, not
    any node's."""
    m = matrix(doc)
    env = doc.get("environment", {})
    lost = env.get("lost_nodes") or {}
    excluded = env.get("excluded_nodes") or {}
    out: list[NodeVerdict] = []
    known = known_nodes(doc)
    unattributed: list[str] = []  # a failure of several nodes together that no isolation pinned on one
    gone = sorted({*lost, *excluded})
    for node in [*known, *[n for n in excluded if n not in known]]:
        bad: list[str] = []
        skipped: list[str] = []
        bad_checks: list[str] = []
        skipped_checks: list[str] = []
        if node in excluded:
            bad.append(f"{node}: Slurm reports it {excluded[node]}; not tested")
        if node in lost:
            seen = lost[node]
            why = seen.get("why", seen) if isinstance(seen, Mapping) else seen
            bad.append(f"{node}: lost during the run: {why}")
        for col in m.columns:
            cell = m.cell(node, col)
            if SEVERITY.get(cell.status, 0) >= SEVERITY["xpass"]:
                for line in (x for x in cell.lines if _says_failure(x)):
                    others = [n for n in nodes_in(line, gone) if n != node] if node not in gone else []
                    if others:
                        skipped.append(f"not judged: {hostlist(others)} lost or left out ({line})")
                        skipped_checks.append(col[1])
                    elif _convicts(line, node):
                        bad.append(line)
                        bad_checks.append(col[1])
                    else:
                        unattributed.append(line)
            elif cell.status == "skip":
                skipped += list(cell.lines)
                skipped_checks.append(col[1])
        bad = fold_lines(dict.fromkeys(bad), known)
        if bad:
            out.append(NodeVerdict(node, "REJECTED", tuple(bad), tuple(dict.fromkeys(bad_checks))))
        elif skipped:
            out.append(
                NodeVerdict(node, "INCOMPLETE", tuple(fold_lines(dict.fromkeys(skipped), known)), tuple(skipped_checks))
            )
        else:
            partial = run_verdict == "PARTIAL" or bool((doc.get("selection") or {}).get("partial"))
            out.append(NodeVerdict(node, "PARTIAL" if partial else "ACCEPTED"))
    everyone = [*known, *excluded]
    cluster_wide = tuple(
        fold_lines(
            dict.fromkeys(
                [
                    *(
                        line
                        for col in m.columns
                        for line in m.cell(CLUSTER_ROW, col).lines
                        if SEVERITY.get(m.cell(CLUSTER_ROW, col).status, 0) >= SEVERITY["xpass"]
                        and _says_failure(line)
                        and not nodes_in(line, everyone)
                    ),
                    *unattributed,
                ]
            ),
            everyone,
        )
    )
    summary = nodes_summary({v.node: v.verdict for v in out}, len(cluster_wide))
    return Nodes(tuple(out), cluster_wide, summary, hostlist([v.node for v in out if v.verdict == "REJECTED"]))


def nodes_summary(verdicts: Mapping[str, str], cluster_wide: int) -> str:
    """ "14 of 16 nodes accepted; rejected: gpu-[03,11]; not judged in full: ...": node → verdict."""
    accepted = [n for n, v in verdicts.items() if v == "ACCEPTED"]
    rejected = [n for n, v in verdicts.items() if v == "REJECTED"]
    unsure = [n for n, v in verdicts.items() if v not in ("ACCEPTED", "REJECTED")]
    parts = [f"{len(accepted)} of {len(verdicts)} node{'s' if len(verdicts) != 1 else ''} accepted"]
    if rejected:
        parts.append(f"rejected: {hostlist(rejected)}")
    if unsure:
        parts.append(f"not judged in full: {hostlist(unsure)}")
    if cluster_wide:
        parts.append(f"{cluster_wide} failure(s) name no single node")
    return "; ".join(parts)


def _convicts(line: str, node: str) -> bool:
    """Whether a failure sentence is ``node``'s own: its place is the node (``node3``,
    ``node3:gpu5``), or it is a measurement of several nodes together (``node1+node2``) whose
    bad-node isolation named ``node``. A pair that failed with no node isolated may be the
    fabric's: it convicts neither node."""
    where = line.split(": ", 1)[0]
    if "+" not in where:
        return True
    named = re.search(r"bad node\(s\): ([^(]*)", line)
    return bool(named and node in [n.strip() for n in named.group(1).split(",")])


def _says_failure(line: str) -> bool:
    """Whether a matrix cell's line explains a failure (not a pass or a warning beside it)."""
    return not line.endswith((": pass", ": warn")) and "within bounds" not in line and "the warn line" not in line


def hostlist(names: Sequence[str]) -> str:
    """Node names as a Slurm hostlist: ``gpu-03, gpu-11, gpu-12`` → ``gpu-[03,11-12]``."""
    groups: dict[tuple[str, int], list[int]] = {}
    plain: list[str] = []
    for name in names:
        match = re.fullmatch(r"(.*?)(\d+)", name)
        if match is None:
            plain.append(name)
            continue
        prefix, digits = match.group(1), match.group(2)
        groups.setdefault((prefix, len(digits)), []).append(int(digits))  # same width: one range
    out = list(plain)
    for (prefix, width), numbers in groups.items():
        numbers = sorted(set(numbers))
        spans = runs_as_text(numbers, dash="-", width=width)
        out.append(f"{prefix}{spans[0]}" if len(numbers) == 1 else f"{prefix}[{','.join(spans)}]")
    return ",".join(out)


# --------------------------------------------------------------------------- environment


# Display name → keys other checks may record the fact under (first present wins).
VERSION_FACTS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("pytest-gpucluster", ("plugin",)),
    ("Python", ("python",)),
    ("PyTorch", ("torch",)),
    ("NCCL", ("nccl", "nccl_version", "torch_nccl")),
    ("CUDA", ("cuda", "cuda_version", "torch_cuda")),
    ("NVIDIA driver", ("driver", "driver_version", "nvidia_driver")),
    ("Slurm", ("slurm", "slurm_version")),
    ("submitit", ("submitit",)),
    ("pytest", ("pytest",)),
)


def versions(doc: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The software versions a customer asks about, in a fixed order; "not recorded" where no
    check recorded the fact (from the environment, else the same fact found in every node's
    inventory, else the distinct values across nodes)."""
    env = doc.get("environment", {})
    inventory = doc.get("inventory", {})
    out = []
    for label, keys in VERSION_FACTS:
        value: Any = next((env[k] for k in keys if env.get(k) not in (None, "")), None)
        if value is None and isinstance(inventory, Mapping):
            # An inventory keeps the compared facts under "summary" (workloads/inventory.py).
            nodes = [f.get("summary", f) for f in inventory.values() if isinstance(f, Mapping)]
            seen = sorted(
                {
                    str(facts[k])
                    for facts in nodes
                    if isinstance(facts, Mapping)
                    for k in keys
                    if facts.get(k) not in (None, "", "n/a")
                }
            )
            value = " / ".join(seen) if seen else None
        out.append((label, "not recorded" if value is None else str(value)))
    return out


def gpu_summary(doc: Mapping[str, Any]) -> str:
    """``2 nodes × 8 NVIDIA H100 80GB HBM3 = 16 GPUs``; where the caller's CUDA_VISIBLE_DEVICES
    chose a local run's GPUs, that too (``...; CUDA_VISIBLE_DEVICES=0,1,2: 3 of 4 GPUs``)."""
    cluster = doc.get("cluster", {})
    nodes = len(doc.get("nodes", [])) or int(cluster.get("nodes_expected", 0) or 0)
    per_node = int(cluster.get("gpus_per_node", 0) or 0)
    model = str(cluster.get("gpu_model") or "GPU")
    noun = "node" if nodes == 1 else "nodes"
    chosen = (doc.get("environment") or {}).get("cuda_visible_devices")
    also = f"; {chosen}" if chosen else ""
    if not per_node:
        return f"{nodes} {noun}, no GPU devices ({model}){also}"
    return f"{nodes} {noun} × {per_node} {model} = {nodes * per_node} GPUs{also}"


def handover(earlier: Mapping[str, Any], earlier_ref: str, doc: Mapping[str, Any], now_ref: str) -> dict[str, Any]:
    """The handover verdict of a re-test merged with an earlier run (``--merge-results``).

    A node this run tested takes this run's verdict, and an ACCEPTED or PARTIAL one counts as
    ACCEPTED only when every check that decided its earlier verdict ran again and passed (INCOMPLETE
    otherwise, naming those checks). A node this run did not test keeps its
    earlier verdict. Failures the earlier run could pin on no node stand until a run without them.
    ACCEPTED only when every node is; REJECTED when any node is."""
    before = ((earlier.get("acceptance") or {}).get("nodes") or {}).get("verdicts") or {}
    now_acc = doc.get("acceptance") or {}
    now = (now_acc.get("nodes") or {}).get("verdicts") or {}
    m = matrix(doc)
    merged: dict[str, dict[str, Any]] = {}
    for node in dict.fromkeys([*before, *now]):
        if node not in now:
            merged[node] = {**before[node], "from": earlier_ref}
            continue
        mine = dict(now[node])
        if mine.get("verdict") in ("PARTIAL", "ACCEPTED"):
            passed = {col[1] for col in m.columns if m.cell(node, col).status in ("pass", "warn")}
            deciding = (before.get(node) or {}).get("checks") or []
            missing = [c for c in deciding if c not in passed]
            if missing:
                mine = {
                    **mine,
                    "verdict": "INCOMPLETE",
                    "reasons": [
                        f"{node}: the re-test did not pass again {', '.join(missing)}, which decided "
                        f"its earlier verdict ({(before.get(node) or {}).get('verdict')}); a check across "
                        "nodes needs an accepted node beside it in --nodes"
                    ],
                }
            else:
                mine = {**mine, "verdict": "ACCEPTED"}
        merged[node] = {**mine, "from": now_ref}
    earlier_wide = list(((earlier.get("acceptance") or {}).get("nodes") or {}).get("cluster_wide") or [])
    wide = list(dict.fromkeys([*earlier_wide, *((now_acc.get("nodes") or {}).get("cluster_wide") or [])]))
    verdicts = {n: str(v["verdict"]) for n, v in merged.items()}
    rejected = [n for n, v in verdicts.items() if v == "REJECTED"]
    unsure = [n for n, v in verdicts.items() if v not in ("ACCEPTED", "REJECTED")]
    verdict = "REJECTED" if rejected else "INCOMPLETE" if unsure or wide else "ACCEPTED"
    retested = [n for n in merged if n in now]
    return {
        "verdict": verdict,
        "summary": nodes_summary(verdicts, len(wide)),
        "exclude": hostlist(rejected),
        "retested": retested,
        "earlier": earlier_ref,
        "earlier_started": earlier.get("started"),
        "this_run": now_ref,
        "cluster_wide": wide,
        "nodes": merged,
    }

"""HTML of the acceptance report, from a results document: each function gathers what one block
shows (plain strings, numbers already formatted) and renders it with a Jinja2 template of
``report/templates/``. Autoescaping is on: every value from a run (node names, messages, logs) is
escaped by the template engine; only the rendered blocks themselves are passed on as markup.

The blocks are placed into pytest-html's page by ``report/pytest_html_hooks.py`` and into a
standalone page by ``render_page`` (``python -m pytest_gpucluster.report``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection, Mapping, Sequence
from functools import cache
from importlib import resources
from typing import Any

import jinja2
from markupsafe import Markup

from pytest_gpucluster import verdict
from pytest_gpucluster.report import figures, handover, inventory, model, plots, rounds, soak, storage
from pytest_gpucluster.report.node_fixes import failing, node_fixes
from pytest_gpucluster.results import codec
from pytest_gpucluster.results.timing import start_up_note
from pytest_gpucluster.verdict.attribution import path_cells
from pytest_gpucluster.verdict.check import Column
from pytest_gpucluster.verdict.findings import SEVERITY, test_label, worst
from pytest_gpucluster.verdict.fold import fold_lines
from pytest_gpucluster.verdict.run import COUNTED

STATUS_TEXT = {
    "pass": "pass",
    "warn": "warn",
    "fail": "FAIL",
    "not_judged": "not judged",
    "fault": "not judged (fault outside the nodes)",
    "interrupted": "interrupted",
    "n/a": "n/a",
    "xfail": "expected fail",
    "xpass": "unexpected pass",
    "path": "path only",  # a matrix cell whose every pass is against a line that only proves a path
    "none": "",
}
STATUS_SYMBOL = {
    "pass": "✓",
    "path": "↔",
    "warn": "!",
    "fail": "✗",
    "xpass": "✗",
    "xfail": "x",
    "not_judged": "–",
    "fault": "–",
    "interrupted": "–",
    "n/a": "·",
}
NODE_BADGE = {"ACCEPTED": "pass", "REJECTED": "fail", "INCOMPLETE": "not_judged", "PARTIAL": "n/a"}
# Up to this many nodes the report has a row per node everywhere; past it, nodes whose checks all
# passed share one row named by their hostlist, and identical inventories one column.
NODE_ROWS = 16
# Nodes drawn in the storage section's bar chart at most (the slowest, where there are more): a bar
# pair per node of a thousand-node cluster would be an image metres tall.
STORAGE_BAR_NODES = 48

TEMPLATES = "templates"


def _load(name: str) -> str:
    # importlib.resources finds the templates in a source tree, a wheel install or a zip alike.
    return (resources.files("pytest_gpucluster.report") / TEMPLATES / name).read_text(encoding="utf-8")


def anchor(nodeid: str) -> str:
    """The id of a test's details in the page (``gc-t-`` and a digest of its node id): what a
    failure line links to."""
    return "gc-t-" + hashlib.sha1(str(nodeid).encode(), usedforsecurity=False).hexdigest()[:12]


def css(status: str) -> str:
    """A status as a CSS class suffix (``n/a`` → ``na``)."""
    return status.replace("/", "")


@cache
def environment() -> jinja2.Environment:
    """The report's template environment: package templates, autoescaping on, undefined names
    an error (a misspelt variable fails a test instead of rendering empty)."""
    env = jinja2.Environment(
        loader=jinja2.FunctionLoader(lambda name: (_load(name), None, lambda: True)),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(
        css=css, hostlist=verdict.hostlist, check_name=lambda name: str(name).removeprefix("test_"), anchor=anchor
    )
    env.globals.update(STATUS_TEXT=STATUS_TEXT, NODE_BADGE=NODE_BADGE)
    return env


def _render(template: str, **context: Any) -> str:
    return str(Markup(environment().get_template(template).render(**context)))


def badge(status: str) -> str:
    """A coloured verdict word."""
    return str(environment().get_template("macros.html.j2").module.badge(status))  # type: ignore[attr-defined]


# Printing opens every folded list first: a closed <details> prints as its summary line only.
PRINT_SCRIPT = (
    "<script>addEventListener('beforeprint', () => "
    "document.querySelectorAll('details').forEach(d => d.setAttribute('open', '')));</script>"
)


def style() -> str:
    """The report's style sheet, inline (a self-contained report has no external assets), and
    the line of script that opens folded lists for printing."""
    return f"<style>\n{_load('report.css')}</style>{PRINT_SCRIPT}"


def acceptance_block(
    doc: Mapping[str, Any], recorded: verdict.Recorded, results_file: handover.ResultsFile | None = None
) -> str:
    """The handover sheet (verdict, every warning, the parties, nodes accepted, exclusions, the soak
    where one ran, command and selection, thresholds file and hash, the results file's hash, date,
    the tool's version, key figures against their lines, what was not tested and why, the GPUs
    handed over, and for an ACCEPTED run room for two signatures: the first page(s) when
    printed), then the counts behind the verdict, each node that
    is not accepted with the checks and sentences that decided it, and the failures, one line per
    node, check and cause."""
    cluster = doc.get("cluster", {})
    acc = recorded.acceptance
    why = {
        "ACCEPTED": "Every check the profile requires ran and passed.",
        "REJECTED": "At least one check failed; each failure below names its node, GPU, port or job.",
        "INCOMPLETE": "No check failed, but checks the profile requires were not judged; see why below.",
        "PARTIAL": "Every selected check passed, but the selection left required checks out: not an acceptance.",
    }[acc.verdict]
    rule = (
        "Rule: a failure → REJECTED; a required check skipped, unjudged or not reached → INCOMPLETE; "
        "required checks left out by the selection → PARTIAL; otherwise ACCEPTED. "
        "Checks that do not apply to the profile are n/a."
    )
    chips = [
        {"status": k, "count": acc.counts.get(k, 0), "label": COUNT_LABELS[k]}
        for k in COUNTED
        if acc.counts.get(k, 0) or k in ("pass", "warn", "fail", "not_judged")
    ]
    names = [str(n) for n in doc.get("nodes", [])]
    node_text = f"{len(names)} nodes: {verdict.hostlist(names)}" if len(names) > NODE_ROWS else ", ".join(names)
    excluded = doc.get("environment", {}).get("excluded_nodes", {})
    nodes = recorded.nodes
    order = {"REJECTED": 0, "INCOMPLETE": 1}
    skipped = [t for t in doc.get("tests", []) if t.get("verdict") in ("not_judged", "fault", "interrupted")]
    title = {"REJECTED": "Failures", "INCOMPLETE": "Why incomplete", "PARTIAL": "Left out of this run"}
    accepted = [v.node for v in nodes.verdicts if v.verdict == "ACCEPTED"]
    unsure = [v.node for v in nodes.verdicts if v.verdict not in ("ACCEPTED", "REJECTED")]
    failures: list[dict[str, Any]] = []
    if acc.verdict == "REJECTED" and acc.findings:
        failures = [{"text": f.text, "count": f.count, "anchor": anchor(f.nodeid)} for f in acc.findings]
    elif acc.reasons and acc.verdict != "ACCEPTED":
        failures = [{"text": r, "count": 1, "anchor": ""} for r in acc.reasons]
    version = dict(model.versions(doc)).get("pytest-gpucluster", "not recorded")
    fix_first, fix_later = failing(node_fixes(doc))
    return _render(
        "acceptance.html.j2",
        acc=acc,
        why=why,
        rule=rule,
        chips=chips,
        profile=doc.get("profile", "?"),
        description=cluster.get("description") or "",
        node_text=node_text or "none",
        excluded=[f"{n} ({reason})" for n, reason in excluded.items()],
        started=doc.get("started", "?"),
        finished=doc.get("finished") or "not finished",
        gpus=model.gpu_summary(doc),
        status=doc.get("status", "?"),
        tested=_tested(doc),
        thresholds_file=doc.get("thresholds_file", "?"),
        thresholds_set=doc.get("environment", {}).get("thresholds_set", "?"),
        thresholds_sha256=doc.get("thresholds_sha256") or "not recorded",
        version=version,
        key_figures=figures.key_figures(doc),
        node_fixes=fix_first,
        node_warnings=fix_later,
        soak=soak.sheet_line(doc),
        storage=storage.sheet_line(doc),
        sheet=handover.sheet(doc, recorded, results_file),
        nodes=nodes if nodes.verdicts else None,
        judged=sorted((v for v in nodes.verdicts if v.verdict in order), key=lambda v: order[v.verdict]),
        accepted=accepted,
        unsure=unsure,
        partial=[v.node for v in nodes.verdicts if v.verdict == "PARTIAL"],
        failures_title=title.get(acc.verdict, ""),
        failures=failures,
        # an incomplete run lists its skipped checks among its reasons
        skipped=fold_lines(
            [f"{test_label(t['nodeid'])}: {verdict.first_line(t.get('message', ''))}" for t in skipped],
            list(recorded.matrix.rows),
        )
        if acc.verdict != "INCOMPLETE"
        else [],
        not_applicable=[
            f"{reason} ({len(checks)}: {short_list(checks, 3)})"
            for reason, checks in not_applicable_groups(doc, recorded).items()
        ],
    )


def not_applicable_groups(doc: Mapping[str, Any], recorded: verdict.Recorded) -> dict[str, list[str]]:
    """The checks that do not apply, by reason, in the order of the results: the summary's list and
    pytest-html's table show the same groups. Reasons that differ only in the node they name are one
    group naming the nodes as a hostlist, as on the handover sheet."""
    return handover.by_reason(recorded.acceptance.not_applicable, [str(n) for n in doc.get("nodes", [])])


COUNT_LABELS = {
    "pass": "passed",
    "warn": "passed with warnings",
    "fail": "failed",
    "not_judged": "not judged",
    "fault": "stopped by a fault outside the nodes",
    "interrupted": "interrupted",
    "n/a": "not applicable",
    "xfail": "expected failures",
    "xpass": "unexpected passes",
}


# pytest's outcomes that pytest-html's "N tests took" line counts: the checks that ran.
RAN = ("passed", "failed", "xpassed", "xfailed")


def _tested(doc: Mapping[str, Any]) -> str:
    """``57 checks in 20 areas: 29 ran, 28 not applicable``: every check by area, then how many
    ran (the count pytest-html's "29 tests took" line gives) and why the others did not run, in
    the counts' own words."""
    areas: dict[str, int] = {}
    tests = list(doc.get("tests", []))
    for t in tests:
        areas[str(t.get("area", "tests"))] = areas.get(str(t.get("area", "tests")), 0) + 1
    total = sum(areas.values())
    listing = ", ".join(f"{a} ({n})" for a, n in areas.items())
    ran = sum(1 for t in tests if t.get("outcome") in RAN)
    others: dict[str, int] = {}
    for t in tests:
        if t.get("outcome") not in RAN:
            label = COUNT_LABELS.get(str(t.get("verdict")), "errored")
            others[label] = others.get(label, 0) + 1
    split = "".join(f", {n} {label}" for label, n in others.items())
    return (
        f"{total} check{'s' if total != 1 else ''} in {len(areas)} area{'s' if len(areas) != 1 else ''}: "
        f"{ran} ran{split}; {listing}"
    )


def environment_block(doc: Mapping[str, Any]) -> str:
    """Software versions, the thresholds file's checksum and the inventory: a row per node (on a
    large cluster, per group of nodes alike) in words, the details folded beneath it."""
    env = doc.get("environment", {})
    shown = {k for _, keys in model.VERSION_FACTS for k in keys} | {"excluded_nodes"}
    rows, note = inventory.inventory_rows(doc.get("inventory", {}), NODE_ROWS)
    return _render(
        "environment.html.j2",
        versions=model.versions(doc),
        thresholds_file=doc.get("thresholds_file", "?"),
        thresholds_sha256=doc.get("thresholds_sha256", "?"),
        others=[(k, inventory.plain(v)) for k, v in sorted(env.items()) if k not in shown],
        inventory={"columns": inventory.COLUMNS, "rows": rows, "note": note, "differ": inventory.differing(rows)}
        if rows
        else None,
    )


def matrix_block(m: verdict.Matrix, paths: Collection[tuple[str, Column]] = frozenset()) -> str:
    """The node × check matrix: one row per node (past ``NODE_ROWS`` nodes, the nodes with
    anything but passes first and the rest in one row), one column per check; hover for details.
    A passing cell of ``paths`` (``verdict.attribution.path_cells``) has a look of its own: it proves a path,
    not a speed."""
    if not m.columns:
        return ""
    areas: list[tuple[str, int]] = []
    for area, _ in m.columns:
        if areas and areas[-1][0] == area:
            areas[-1] = (area, areas[-1][1] + 1)
        else:
            areas.append((area, 1))
    rows = []
    shown: set[str] = set()
    nodes = [r for r in m.rows if r != verdict.CLUSTER_ROW]
    for row in model.matrix_rows(m, NODE_ROWS):
        cells = []
        for col in m.columns:
            cell = row.cell(m, col)
            tip = "\n".join(fold_lines(cell.lines, nodes)[:20]) or "not run on this node"
            status = cell.status
            if status == "pass" and all((n, col) in paths for n in row.nodes):
                status, tip = "path", f"path proven: its lines prove a path, not a speed\n{tip}"
            shown.add(status)
            cells.append({"status": status, "tip": tip, "symbol": STATUS_SYMBOL.get(status, "")})
        rows.append({"label": row.label, "group": len(row.nodes) > 1, "cells": cells})
    row_status = {r: worst(m.cell(r, c).status for c in m.columns) for r in m.rows}
    failing = [r for r, st in row_status.items() if st in ("fail", "xpass") and r != verdict.CLUSTER_ROW]
    warning = [r for r, st in row_status.items() if st == "warn" and r != verdict.CLUSTER_ROW]
    return _render(
        "matrix.html.j2",
        failing=short_list(failing),
        warning=short_list(warning),
        legend=("pass", *(("path",) if "path" in shown else ()), "warn", "fail", "not_judged", "n/a"),
        cluster_row=verdict.CLUSTER_ROW,
        grouped=any(r["group"] for r in rows),
        areas=areas,
        columns=[name.removeprefix("test_") for _, name in m.columns],
        rows=rows,
    )


def plots_block(doc: Mapping[str, Any]) -> str:
    """Series plots (threshold lines dashed) and per-place spread plots of repeated metrics."""
    rendered = plots.series_plots(doc) + plots.spread_plots(doc)
    if not rendered:
        return ""
    return _render("plots.html.j2", plots=rendered)


def gpu_map_block(doc: Mapping[str, Any]) -> str:
    """Per GPU: a map of nodes × GPUs for each metric measured on GPUs, each cell coloured against
    the metric's line (passes paler the further they sit from the median toward it), the value in
    the cell and in full on hover; a map of the metrics measured once per node; metrics that read
    the same everywhere as one line."""
    maps, uniform = figures.gpu_maps(doc)
    if not maps and not uniform:
        return ""
    return _render("gpumap.html.j2", maps=maps, uniform=uniform, shades=figures.SHADES)


def rounds_block(doc: Mapping[str, Any]) -> str:
    """The across-node rounds over the switch tree, where they ran: per collective what they named
    (a node, a leaf, a leaf's uplinks, a path between leaves), the leaf-to-leaf heatmap of the lowest
    busbw, each leaf's nodes, accepted nodes and lowest busbw, and the slowest groups."""
    found = rounds.sections(doc)
    if not found:
        return ""
    drawn = [
        {
            "s": s,
            "uri": plots.heatmap(f"{s.op}: lowest busbw between leaves", s.matrix_labels, s.matrix, s.fail_below),
        }
        for s in found
    ]
    return _render(
        "rounds.html.j2",
        sections=[{**vars(d["s"]), "uri": d["uri"]} for d in drawn],
        value=rounds.value_text,
    )


def soak_block(doc: Mapping[str, Any]) -> str:
    """The soak, where one ran: per node how it ended, how long it ran of the length asked for, its
    cycles and its recorded verdicts; per node TFLOP/s, SM clock, temperature and power over time,
    one line per GPU, the failing ones marked (past ``NODE_ROWS`` nodes only the nodes with
    something to see); the drift table; the findings; the rules in force with their sources."""
    content = soak.block(doc, NODE_ROWS)
    if content is None:
        return ""
    drawn = [
        {
            "node": f.node,
            "caption": f.caption,
            "note": f.note,
            "uri": plots.small_multiples(f"soak of {f.node}", f.panels, f.marks, "minutes since the node's soak began"),
        }
        for f in content.figures
    ]
    return _render("soak.html.j2", soak=content, figures=drawn, shown=soak.SHOWN_FINDINGS)


def storage_block(doc: Mapping[str, Any]) -> str:
    """Storage, where its tests ran: the aggregate, each node's streams (and a bar chart of each
    node's write and read), visibility, the large directory, the cold import and the checkpoint
    from every GPU with its slowest rank."""
    content = storage.view(doc)
    if content is None:
        return ""
    bars, title = storage.chart_bars(content.bars, STORAGE_BAR_NODES)
    uri = (
        plots.bars(
            title,
            [b.node for b in bars],
            {"write": [b.write for b in bars], "read": [b.read for b in bars]},
            "MB/s (the node's streams together)",
        )
        if bars
        else ""
    )
    return _render("storage.html.j2", s=content, bars_uri=uri)


def baseline_block(section: Mapping[str, Any] | None, limit: int = 40) -> str:
    """This run against the baseline: environment differences, then the largest changes."""
    if not section:
        return ""
    changes = list(section.get("changes", []))
    shown = [
        {
            "metric": c["metric"],
            "where": c["where"],
            "detail": c["detail"],
            "before": f"{c['before']:.4g}",
            "after": f"{c['after']:.4g}",
            "regression": f"{c['regression_pct']:+.1f} %",
            "status": str(c["status"]),
        }
        for c in changes[:limit]
    ]
    return _render(
        "baseline.html.j2",
        path=section.get("path", ""),
        diffs=list(section.get("environment_differences", [])),
        changes=shown,
        more=max(len(changes) - limit, 0),
        missing=len(section.get("only_in_baseline", [])),
    )


def details_of_test(test: Mapping[str, Any], *, limit: int = 200) -> str:
    """Everything judged in one test (shown when its row is expanded): measurements with their
    bounds, problems, and the end of the job logs of a failure."""
    ms = list(test.get("measurements", []))
    problems = list(test.get("problems", []))
    logs = list(test.get("logs", []))
    bad = test.get("verdict") in ("fail", "xpass")
    if not (ms or problems or logs or bad):
        return ""
    ordered = sorted(ms, key=lambda m: -SEVERITY.get(str(m.get("status")), 0))
    rows = [
        {
            "status": str(m.get("status")),
            "metric": m.get("metric", ""),
            "where": m.get("where", ""),
            "detail": m.get("detail", ""),
            "value": model.measurement_value(m),
            "threshold": model.describe_threshold(m),
            "source": model.threshold_source(m),
            "job": m.get("job_id") or "",
        }
        for m in ordered[:limit]
    ]
    return _render(
        "details.html.j2",
        anchor=anchor(str(test.get("nodeid", ""))),
        measurements=rows,
        more=max(len(ms) - limit, 0),
        problems=problems,
        logs=[{"job_id": g.get("job_id", ""), "path": g.get("path", ""), "tail": g.get("tail", "")} for g in logs],
    )


def table_cells(test: Mapping[str, Any] | None, gpu_model: str = "") -> list[str]:
    """The five extra results-table cells: measured, threshold, verdict, node/GPU, job."""
    cells: Any = environment().get_template("cells.html.j2").module
    if test is None:
        return [str(cells.cell(c, "")) for c in ("measured", "threshold", "verdict", "where", "jobs")]
    c = model.test_cells(test, gpu_model)
    return [
        str(cells.cell("measured", c.measured)),
        str(cells.cell("threshold", c.threshold)),
        str(cells.verdict_cell(c.verdict)),
        str(cells.cell("where", c.where)),
        str(cells.cell("jobs", c.jobs)),
    ]


def cells_macro(name: str, *args: Any) -> str:
    """One macro of ``cells.html.j2`` (a results-table cell, a row's folded list), values escaped."""
    return str(getattr(environment().get_template("cells.html.j2").module, name)(*args))


TABLE_HEADER = [
    '<th class="sortable" data-column-type="measured">Measured</th>',
    '<th class="gc-th-threshold">Threshold</th>',
    '<th class="sortable" data-column-type="verdict">Verdict</th>',
    '<th class="sortable" data-column-type="where">Node/GPU</th>',
    '<th class="gc-th-jobs">Job</th>',
]


def timing_block(doc: Mapping[str, Any]) -> str:
    """Where the run's time went, per area, and the harness's share of it."""
    timing = doc.get("timing")
    if not isinstance(timing, Mapping) or not timing.get("areas"):
        return ""
    share = timing.get("harness_fraction")
    note = (
        f"{float(timing.get('wall_s', 0)):.1f} s in all; workloads ran on the nodes for "
        f"{float(timing.get('workload_s', 0)):.1f} s; the rest, {float(timing.get('harness_s', 0)):.1f} s"
        + (f" ({100 * float(share):.0f} %)" if share is not None else "")
        + ", went to submission, queueing, job start-up, collecting results and pytest itself."
    )
    parts = timing.get("harness_parts")
    if isinstance(parts, Mapping) and parts:
        note += (
            f" Of that: {float(parts.get('scheduling_s', 0)):.1f} s from submission to a job's first process "
            f"(scheduling, step launch), {float(parts.get('start_up_s', 0)):.1f} s process start-up before the "
            f"workload's clock, {float(parts.get('pickup_s', 0)):.1f} s from a workload's end until its results "
            f"were read, {float(parts.get('between_jobs_s', 0)):.1f} s between jobs (pytest, checks on the login "
            "node, a previous job still ending)."
        )
    waited = start_up_note(timing)
    if waited:
        note += f" {waited[0].upper()}{waited[1:]}."
    rows = [
        {
            "area": area,
            "tests": a.get("tests"),
            "duration": f"{float(a.get('duration_s', 0)):.1f}",
            "workload": f"{float(a.get('workload_s', 0)):.1f}",
            "jobs": a.get("jobs"),
        }
        for area, a in sorted(timing["areas"].items(), key=lambda kv: -float(kv[1].get("duration_s", 0)))
    ]
    return _render("timing.html.j2", note=note, rows=rows)


def render_page(
    doc: Mapping[str, Any], *, title: str = "GPU cluster acceptance", results_file: handover.ResultsFile | None = None
) -> str:
    """A standalone page from a results document alone (no pytest-html): the same summary,
    environment, matrix, plots, soak and baseline, then every test with its details (those of a
    failure open)."""
    recorded = codec.decode_recorded(doc)
    blocks = [
        acceptance_block(doc, recorded, results_file),
        environment_block(doc),
        matrix_block(recorded.matrix, path_cells(codec.decode_run(doc))),
        gpu_map_block(doc),
        plots_block(doc),
        rounds_block(doc),
        soak_block(doc),
        storage_block(doc),
        baseline_block(doc.get("baseline")),
        timing_block(doc),
    ]
    bad = ("fail", "xpass")
    gpu = model.gpu_model(doc)
    tests = [
        {
            "verdict": str(t.get("verdict")),
            "nodeid": t.get("nodeid"),
            "cells": model.test_cells(t, gpu),
            "message": t["message"] if t.get("message") and t.get("verdict") in bad else "",
            "details": Markup(details_of_test(t)),
            "open": t.get("verdict") in bad,
        }
        for t in doc.get("tests", [])
    ]
    return _render(
        "page.html.j2",
        title=title,
        css=Markup(_load("report.css")),
        script=Markup(PRINT_SCRIPT),
        profile=doc.get("profile", ""),
        blocks=[Markup(b) for b in blocks if b],
        tests=tests,
    )


def short_list(values: Sequence[str], limit: int = 8) -> str:
    """``a, b, c … (+5)``."""
    head = ", ".join(values[:limit])
    return head + (f" … (+{len(values) - limit})" if len(values) > limit else "")

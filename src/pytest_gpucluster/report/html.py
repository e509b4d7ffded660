"""HTML fragments of the acceptance report, from a results document. Pure string building:
every value from a run (node names, messages, logs) is escaped here, once, at the edge.

The fragments are placed into pytest-html's page by ``report/pytest_html_hooks.py`` and into a
standalone page by ``render_page`` (``python -m pytest_gpucluster.report``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from html import escape
from typing import Any

from pytest_gpucluster.report import model, plots

STATUS_TEXT = {"pass": "pass", "warn": "warn", "fail": "FAIL", "error": "ERROR", "skip": "skipped",
               "n/a": "n/a", "xfail": "expected fail", "xpass": "unexpected pass", "none": ""}  # fmt: skip
STATUS_SYMBOL = {"pass": "✓", "warn": "!", "fail": "✗", "error": "✗", "xpass": "✗", "xfail": "x", "skip": "–",
                 "n/a": "·"}  # fmt: skip

CSS = """
body { display: flex; flex-direction: column; }
body > h1 { order: -3; } body > p { order: -2; } .summary { order: -1; }
#environment-header, #environment { order: 5; }
#results-table { order: 2; } footer { order: 6; }
.gc { color: #1f2933; font-size: 13px; margin: 0 0 18px 0; }
.gc h2 { margin: 18px 0 8px 0; font-size: 17px; }
.gc h3 { margin: 12px 0 6px 0; font-size: 14px; color: #1f2933; }
.gc table { border-collapse: collapse; }
.gc td, .gc th { border: 1px solid #d9dee3; padding: 4px 8px; text-align: left; vertical-align: top; color: #1f2933; }
.gc th { background: #f2f4f6; font-weight: 600; }
.gc-banner { display: flex; align-items: center; gap: 24px; padding: 16px 22px; border-radius: 6px; color: #fff; }
.gc-banner .gc-word { font-size: 34px; font-weight: 800; letter-spacing: 2px; }
.gc-banner .gc-why { font-size: 14px; line-height: 1.5; }
.gc-ACCEPTED { background: #2e7d32; } .gc-REJECTED { background: #c62828; } .gc-INCOMPLETE { background: #ef8f00; }
.gc-PARTIAL { background: #455a64; }
.gc-s-na.gc-cell { background: #fafafa; color: #b0bec5; }
.gc-badge.gc-s-na, .gc-chip.gc-s-na { background: #f5f5f5; color: #78909c; }
.gc-counts { display: flex; flex-wrap: wrap; gap: 8px; margin: 12px 0; }
.gc-chip { padding: 5px 12px; border-radius: 14px; font-weight: 600; background: #eceff1; color: #1f2933; }
.gc-chip.gc-s-pass { background: #e3f1e4; color: #1b5e20; } .gc-chip.gc-s-warn { background: #fff0d6; color: #8a5200; }
.gc-chip.gc-s-fail, .gc-chip.gc-s-error { background: #fde3e3; color: #9b1c1c; }
.gc-facts th { width: 150px; }
.gc-columns { display: grid; grid-template-columns: minmax(560px, 1fr) 1fr; gap: 28px; align-items: start; }
.gc-columns h3:first-child { margin-top: 0; }
.gc-mono { font-family: Menlo, Consolas, "Courier New", monospace; font-size: 12px; }
.gc-reasons li { margin: 3px 0; }
.gc-matrix td.gc-cell { text-align: center; min-width: 26px; font-weight: 700; }
.gc-matrix th.gc-col { writing-mode: vertical-rl; transform: rotate(180deg); white-space: nowrap; font-size: 11px; }
.gc-s-pass.gc-cell { background: #a5d6a7; color: #1b5e20; } .gc-s-warn.gc-cell { background: #ffcc80; color: #6d3d00; }
.gc-s-fail.gc-cell, .gc-s-error.gc-cell, .gc-s-xpass.gc-cell { background: #ef9a9a; color: #7f0000; }
.gc-s-xfail.gc-cell { background: #e1bee7; } .gc-s-skip.gc-cell { background: #eceff1; color: #78909c; }
.gc-badge { padding: 1px 7px; border-radius: 9px; font-weight: 700; font-size: 11px; white-space: nowrap; }
.gc-badge.gc-s-pass { background: #e3f1e4; color: #1b5e20; }
.gc-badge.gc-s-warn { background: #fff0d6; color: #8a5200; }
.gc-badge.gc-s-fail, .gc-badge.gc-s-error, .gc-badge.gc-s-xpass { background: #fde3e3; color: #9b1c1c; }
.gc-badge.gc-s-skip, .gc-badge.gc-s-xfail { background: #eceff1; color: #546e7a; }
.gc-plots { display: flex; flex-wrap: wrap; gap: 14px; }
.gc-plot { border: 1px solid #d9dee3; border-radius: 4px; padding: 6px; background: #fff; }
.gc-plot img { display: block; max-width: 100%; }
.gc-plot figcaption { font-size: 11px; color: #52606d; margin-top: 4px; }
.gc-log { background: #263238; color: #eceff1; padding: 8px; white-space: pre-wrap; max-height: 360px; overflow: auto; }
.gc-note { color: #52606d; font-size: 12px; }
"""


def _e(value: Any) -> str:
    return escape(str(value), quote=True)


def css(status: str) -> str:
    """A status as a CSS class suffix (``n/a`` → ``na``)."""
    return _e(status.replace("/", ""))


def badge(status: str) -> str:
    """A coloured verdict word."""
    return f'<span class="gc-badge gc-s-{css(status)}">{_e(STATUS_TEXT.get(status, status))}</span>'


def style() -> str:
    """The report's style sheet, inline (a self-contained report has no external assets)."""
    return f"<style>{CSS}</style>"


def acceptance_block(doc: Mapping[str, Any], acc: model.Acceptance) -> str:
    """Verdict banner, what was tested where, and the counts behind the verdict."""
    cluster = doc.get("cluster", {})
    why = {
        "ACCEPTED": "Every check the profile requires ran and passed.",
        "REJECTED": "At least one check failed; each failure below names its node, GPU, port or job.",
        "INCOMPLETE": "No check failed, but checks the profile requires were not judged; see why below.",
        "PARTIAL": "Every selected check passed, but the selection left required checks out: not an acceptance.",
    }[acc.verdict]
    profile = _e(doc.get("profile", "?"))
    if cluster.get("description"):
        profile += f' <span class="gc-note">({_e(cluster["description"])})</span>'
    nodes = doc.get("nodes", [])
    excluded = doc.get("environment", {}).get("excluded_nodes", {})
    node_text = _e(", ".join(nodes) or "none")
    if excluded:
        node_text += "<br><b>excluded:</b> " + _e("; ".join(f"{n} ({why})" for n, why in excluded.items()))
    finished = doc.get("finished") or "not finished"
    facts = [
        ("Cluster profile", profile),
        ("Date (UTC)", _e(f"{doc.get('started', '?')} → {finished}")),
        ("Nodes", node_text),
        ("GPUs", _e(model.gpu_summary(doc))),
        ("Run status", _e(doc.get("status", "?"))),
        ("Tested", _e(_tested(doc))),
        ("Thresholds", f'<span class="gc-mono">{_e(doc.get("thresholds_file", "?"))}</span> set '
                       f'<b>{_e(doc.get("environment", {}).get("thresholds_set", "?"))}</b>'),
    ]  # fmt: skip
    rows = "".join(f"<tr><th>{k}</th><td>{v}</td></tr>" for k, v in facts)
    labels = {"pass": "passed", "warn": "passed with warnings", "fail": "failed", "error": "errors",
              "skip": "skipped", "n/a": "not applicable", "xfail": "expected failures",
              "xpass": "unexpected passes"}  # fmt: skip
    chips = "".join(
        f'<span class="gc-chip gc-s-{css(k)}">{acc.counts.get(k, 0)} {labels[k]}</span>'
        for k in model.COUNTED
        if acc.counts.get(k, 0) or k in ("pass", "warn", "fail", "skip")
    )
    lists = ""
    nodes = model.node_verdicts(doc, acc.verdict)
    if nodes.verdicts:
        rows_html = "".join(
            f'<tr><td class="gc-mono">{_e(v.node)}</td><td>{badge(_NODE_BADGE[v.verdict])} {_e(v.verdict)}</td>'
            f"<td>{_e('; '.join(v.reasons[:3]))}{' …' if len(v.reasons) > 3 else ''}</td></tr>"
            for v in nodes.verdicts
            if v.verdict != "ACCEPTED"
        )
        exclude = (f'<br>Hand back the rest with <span class="gc-mono">sbatch --exclude={_e(nodes.exclude)}</span>'
                   if nodes.exclude else "")  # fmt: skip
        table = f'<table class="gc-nodes">{rows_html}</table>' if rows_html else ""
        wide = _list("Failures that name no single node", nodes.cluster_wide, 20) if nodes.cluster_wide else ""
        lists += f'<h3 id="gc-node-summary">Nodes: {_e(nodes.summary)}</h3><p>{exclude}</p>{table}{wide}'
    if acc.reasons and acc.verdict != "ACCEPTED":
        title = {"REJECTED": "Failures", "INCOMPLETE": "Why incomplete", "PARTIAL": "Left out of this run"}
        lists += _list(title[acc.verdict], acc.reasons, 50)
    if acc.warnings:
        lists += _list("Warnings", acc.warnings, 50)
    skipped = [t for t in doc.get("tests", []) if t.get("verdict") == "skip"]
    if skipped and acc.verdict != "INCOMPLETE":  # an incomplete run lists them above
        lines = [f"{model.test_label(t['nodeid'])}: {model.first_line(t.get('message', ''))}" for t in skipped]
        lists += _list("Skipped, with the reason", lines, 100)
    if acc.not_applicable:
        grouped: dict[str, list[str]] = {}
        for line in acc.not_applicable:
            check, _, reason = line.partition(": ")
            grouped.setdefault(reason, []).append(check)
        lines = [f"{reason} ({len(checks)}: {short_list(checks, 3)})" for reason, checks in grouped.items()]
        lists += _list("Not applicable to this profile", lines, 50)
    rule = ("Rule: a failure → REJECTED; a required check skipped, unjudged or not reached → INCOMPLETE; "
            "required checks left out by the selection → PARTIAL; otherwise ACCEPTED. "
            "Checks that do not apply to the profile are n/a.")  # fmt: skip
    return (
        f'<section class="gc" id="gc-acceptance"><div class="gc-banner gc-{acc.verdict}" id="gc-verdict">'
        f'<div class="gc-word">{acc.verdict}</div><div class="gc-why"><b>{_e(acc.headline)}</b><br>{why}<br>'
        f"{rule}</div></div>"
        f'<div class="gc-counts">{chips}</div>'
        f'<div class="gc-columns"><table class="gc-facts">{rows}</table><div>{lists}</div></div></section>'
    )


_NODE_BADGE = {"ACCEPTED": "pass", "REJECTED": "fail", "INCOMPLETE": "skip", "PARTIAL": "n/a"}


def _list(title: str, lines: Sequence[str], limit: int) -> str:
    items = "".join(f"<li>{_e(line)}</li>" for line in lines[:limit])
    more = f"<li>… and {len(lines) - limit} more</li>" if len(lines) > limit else ""
    return f'<h3>{_e(title)}</h3><ul class="gc-reasons">{items}{more}</ul>'


def _tested(doc: Mapping[str, Any]) -> str:
    areas: dict[str, int] = {}
    for t in doc.get("tests", []):
        areas[str(t.get("area", "tests"))] = areas.get(str(t.get("area", "tests")), 0) + 1
    total = sum(areas.values())
    listing = ", ".join(f"{a} ({n})" for a, n in areas.items())
    return f"{total} test{'s' if total != 1 else ''} in {len(areas)} area{'s' if len(areas) != 1 else ''}: {listing}"


def environment_block(doc: Mapping[str, Any]) -> str:
    """Software versions, the thresholds file's checksum and the per-node inventory."""
    rows = "".join(f"<tr><th>{_e(k)}</th><td>{_e(v)}</td></tr>" for k, v in model.versions(doc))
    rows += (
        f'<tr><th>thresholds file</th><td class="gc-mono">{_e(doc.get("thresholds_file", "?"))}</td></tr>'
        f'<tr><th>thresholds sha256</th><td class="gc-mono">{_e(doc.get("thresholds_sha256", "?"))}</td></tr>'
    )
    env = doc.get("environment", {})
    shown = {k for _, keys in model.VERSION_FACTS for k in keys} | {"excluded_nodes"}
    others = "".join(
        f"<tr><th>{_e(k)}</th><td>{_e(v)}</td></tr>" for k, v in sorted(env.items()) if k not in shown
    )
    html = (
        f'<section class="gc" id="gc-environment"><h2>Environment</h2>'
        f'<table class="gc-facts" id="gc-versions">{rows}{others}</table>'
    )
    inventory = doc.get("inventory", {})
    if isinstance(inventory, Mapping) and inventory:
        keys: list[str] = []
        for facts in inventory.values():
            if isinstance(facts, Mapping):
                keys += [k for k in facts if k not in keys]
        keys = keys[:12]
        head = "".join(f"<th>{_e(k)}</th>" for k in keys)
        body = "".join(
            f"<tr><th>{_e(node)}</th>"
            + "".join(f"<td>{_e(_short(facts.get(k, '')))}</td>" for k in keys)
            + "</tr>"
            for node, facts in inventory.items()
            if isinstance(facts, Mapping)
        )
        html += f'<h3>Inventory</h3><table id="gc-inventory"><tr><th>node</th>{head}</tr>{body}</table>'
    return html + "</section>"


def _short(value: Any, limit: int = 80) -> str:
    text = ", ".join(f"{k}: {v}" for k, v in value.items()) if isinstance(value, Mapping) else str(value)
    if isinstance(value, list | tuple):
        text = ", ".join(str(v) for v in value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def matrix_block(m: model.Matrix) -> str:
    """The node × check matrix: one row per node, one column per check; hover for details."""
    if not m.columns:
        return ""
    areas: list[tuple[str, int]] = []
    for area, _ in m.columns:
        if areas and areas[-1][0] == area:
            areas[-1] = (area, areas[-1][1] + 1)
        else:
            areas.append((area, 1))
    area_row = "".join(f'<th colspan="{n}">{_e(a)}</th>' for a, n in areas)
    col_row = "".join(f'<th class="gc-col">{_e(name.removeprefix("test_"))}</th>' for _, name in m.columns)
    body = ""
    for row in m.rows:
        cells = ""
        for col in m.columns:
            cell = m.cell(row, col)
            tip = _e("\n".join(cell.lines[:20]) or "not run on this node")
            cells += (
                f'<td class="gc-cell gc-s-{css(cell.status)}" title="{tip}">{STATUS_SYMBOL.get(cell.status, "")}</td>'
            )
        body += f'<tr><th class="gc-mono">{_e(row)}</th>{cells}</tr>'
    legend = " ".join(badge(s) for s in ("pass", "warn", "fail", "skip", "n/a")) + " — hover a cell for the values."
    row_status = {r: model.worst(m.cell(r, c).status for c in m.columns) for r in m.rows}
    failing = [r for r, st in row_status.items() if st in ("fail", "error", "xpass") and r != model.CLUSTER_ROW]
    warning = [r for r, st in row_status.items() if st == "warn" and r != model.CLUSTER_ROW]
    verdict_line = (
        f"<b>Nodes with a failure:</b> {_e(short_list(failing)) or 'none'}. "
        f"<b>Nodes with a warning:</b> {_e(short_list(warning)) or 'none'}."
    )
    return (
        '<section class="gc" id="gc-matrix-section"><h2>Nodes × checks</h2>'
        f'<p id="gc-bad-nodes">{verdict_line}</p>'
        f'<p class="gc-note">{legend} "{_e(model.CLUSTER_ROW)}": results that name no single node.</p>'
        f'<div style="overflow-x: auto"><table class="gc-matrix" id="gc-matrix"><tr><th></th>{area_row}</tr>'
        f"<tr><th>node</th>{col_row}</tr>{body}</table></div></section>"
    )


def plots_block(doc: Mapping[str, Any]) -> str:
    """Series plots (threshold lines dashed) and per-place spread plots of repeated metrics."""
    rendered = plots.series_plots(doc) + plots.spread_plots(doc)
    if not rendered:
        return ""
    figures = "".join(
        f'<figure class="gc-plot"><img alt="{_e(p.title)}" src="{p.data_uri}"><figcaption>'
        f"{_e(p.caption)}</figcaption></figure>"
        for p in rendered
    )
    return f'<section class="gc" id="gc-plots"><h2>Plots</h2><div class="gc-plots">{figures}</div></section>'


def baseline_block(section: Mapping[str, Any] | None, limit: int = 40) -> str:
    """This run against the baseline: environment differences, then the largest changes."""
    if not section:
        return ""
    diffs = section.get("environment_differences", [])
    html = f'<section class="gc" id="gc-baseline"><h2>Against the baseline</h2><p class="gc-note">' \
           f'Baseline: <span class="gc-mono">{_e(section.get("path", ""))}</span></p>'  # fmt: skip
    if diffs:
        items = "".join(f"<li>{_e(d)}</li>" for d in diffs)
        html += f"<p><b>The baseline was taken on a different environment:</b></p><ul>{items}</ul>"
    changes = list(section.get("changes", []))
    rows = "".join(
        f'<tr><td class="gc-mono">{_e(c["metric"])}</td><td class="gc-mono">{_e(c["where"])}</td>'
        f'<td>{_e(c["detail"])}</td><td>{c["before"]:.4g}</td><td>{c["after"]:.4g}</td>'
        f'<td>{c["regression_pct"]:+.1f} %</td><td>{badge(str(c["status"]))}</td></tr>'
        for c in changes[:limit]
    )
    if changes:
        html += (
            "<table><tr><th>metric</th><th>where</th><th>detail</th><th>baseline</th><th>this run</th>"
            f"<th>regression</th><th>verdict</th></tr>{rows}</table>"
        )
        if len(changes) > limit:
            html += f'<p class="gc-note">{len(changes) - limit} smaller changes are in the results file.</p>'
    missing = section.get("only_in_baseline", [])
    if missing:
        html += f'<p class="gc-note">{len(missing)} measurement(s) of the baseline were not measured in this run.</p>'
    return html + "</section>"


def details_of_test(test: Mapping[str, Any], *, limit: int = 200) -> str:
    """Everything judged in one test (shown when its row is expanded): measurements with their
    bounds, problems, and the end of the job logs of a failure."""
    parts = []
    ms = list(test.get("measurements", []))
    if ms:
        ordered = sorted(ms, key=lambda m: -model.SEVERITY.get(str(m.get("status")), 0))
        rows = "".join(
            f'<tr><td>{badge(str(m.get("status")))}</td><td class="gc-mono">{_e(m.get("metric", ""))}</td>'
            f'<td class="gc-mono">{_e(m.get("where", ""))}</td><td>{_e(m.get("detail", ""))}</td>'
            f"<td>{_e(model.measurement_value(m))}</td>"
            f'<td>{_e(model.describe_threshold(m.get("threshold", {}), str(m.get("unit", ""))))}</td>'
            f'<td>{_e(m.get("job_id") or "")}</td></tr>'
            for m in ordered[:limit]
        )
        more = f'<p class="gc-note">{len(ms) - limit} more in the results file.</p>' if len(ms) > limit else ""
        parts.append(
            "<table><tr><th>verdict</th><th>metric</th><th>where</th><th>detail</th><th>measured</th>"
            f"<th>threshold</th><th>job</th></tr>{rows}</table>{more}"
        )
    problems = test.get("problems", [])
    if problems:
        parts.append("<h3>Problems</h3><ul>" + "".join(f"<li>{_e(p)}</li>" for p in problems) + "</ul>")
    for log in test.get("logs", []):
        parts.append(
            f'<h3>Job {_e(log.get("job_id", ""))}: end of <span class="gc-mono">{_e(log.get("path", ""))}</span></h3>'
            f'<pre class="gc-log gc-mono">{_e(log.get("tail", ""))}</pre>'
        )
    if not parts:
        return ""
    return '<div class="gc gc-details">' + "".join(parts) + "</div>"


def table_cells(test: Mapping[str, Any] | None) -> list[str]:
    """The five extra results-table cells: measured, threshold, verdict, node/GPU, job."""
    if test is None:
        return [f'<td class="col-{c}"></td>' for c in ("measured", "threshold", "verdict", "where", "jobs")]
    c = model.test_cells(test)
    return [
        f'<td class="col-measured">{_e(c.measured)}</td>',
        f'<td class="col-threshold">{_e(c.threshold)}</td>',
        f'<td class="col-verdict">{badge(c.verdict)}</td>',
        f'<td class="col-where">{_e(c.where)}</td>',
        f'<td class="col-jobs">{_e(c.jobs)}</td>',
    ]


TABLE_HEADER = [
    '<th class="sortable" data-column-type="measured">Measured</th>',
    "<th>Threshold</th>",
    '<th class="sortable" data-column-type="verdict">Verdict</th>',
    '<th class="sortable" data-column-type="where">Node/GPU</th>',
    "<th>Job</th>",
]


def timing_block(doc: Mapping[str, Any]) -> str:
    """Where the run's time went, per area, and the harness's share of it."""
    timing = doc.get("timing")
    if not isinstance(timing, Mapping) or not timing.get("areas"):
        return ""
    rows = "".join(
        f"<tr><th>{_e(area)}</th><td>{_e(a.get('tests'))}</td><td>{float(a.get('duration_s', 0)):.1f}</td>"
        f"<td>{float(a.get('workload_s', 0)):.1f}</td><td>{_e(a.get('jobs'))}</td></tr>"
        for area, a in sorted(timing["areas"].items(), key=lambda kv: -float(kv[1].get("duration_s", 0)))
    )
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
    return (
        f'<section class="gc" id="gc-timing"><h2>Time</h2><p class="gc-note">{_e(note)}</p>'
        "<table><tr><th>area</th><th>tests</th><th>tests' time (s)</th><th>workloads ran (s)</th>"
        f"<th>jobs</th></tr>{rows}</table></section>"
    )


def render_page(doc: Mapping[str, Any], *, title: str = "GPU cluster acceptance") -> str:
    """A standalone page from a results document alone (no pytest-html): the same summary,
    environment, matrix, plots and baseline, then every test with its details."""
    acc = model.acceptance(doc)
    rows = ""
    for t in doc.get("tests", []):
        c = model.test_cells(t)
        details = details_of_test(t)
        message = f'<pre class="gc-log gc-mono">{_e(t["message"])}</pre>' if t.get("message") and t.get(
            "verdict") in ("fail", "error", "xpass") else ""  # fmt: skip
        rows += (
            f'<tr><td>{badge(str(t.get("verdict")))}</td><td class="gc-mono">{_e(t.get("nodeid"))}</td>'
            f"<td>{_e(c.measured)}</td><td>{_e(c.threshold)}</td><td>{_e(c.where)}</td><td>{_e(c.jobs)}</td></tr>"
        )
        if details or message:
            rows += f'<tr><td></td><td colspan="5">{message}{details}</td></tr>'
    table = (
        '<section class="gc"><h2>Results</h2><table id="gc-results"><tr><th>verdict</th><th>test</th>'
        f"<th>measured</th><th>threshold</th><th>node/GPU</th><th>job</th></tr>{rows}</table></section>"
    )
    body = "".join(
        [
            acceptance_block(doc, acc),
            environment_block(doc),
            matrix_block(model.matrix(doc)),
            plots_block(doc),
            baseline_block(doc.get("baseline")),
            timing_block(doc),
            table,
        ]
    )
    return (
        f'<!DOCTYPE html><html><head><meta charset="utf-8"><title>{_e(title)}</title>{style()}'
        f'<style>body {{ font-family: Helvetica, Arial, sans-serif; margin: 24px; }}</style></head><body>'
        f"<h1>{_e(title)} — {_e(doc.get('profile', ''))}</h1>{body}</body></html>"
    )


def short_list(values: Sequence[str], limit: int = 8) -> str:
    """``a, b, c … (+5)``."""
    head = ", ".join(values[:limit])
    return head + (f" … (+{len(values) - limit})" if len(values) > limit else "")

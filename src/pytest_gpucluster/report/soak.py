"""What the report shows of a soak, from the results' ``soak`` section (``checks.soak.section``)
and the recorded verdicts: per node how its soak ended, how long it ran of the length asked for,
its cycles and its soak check's verdict; per node the series to draw over time (TFLOP/s, copy TB/s,
the node's all_reduce busbw, SM clock, temperature, power, one line per GPU, the GPUs a failing
finding names marked with the cycle it began in, each warning such as a recovered dip marked
where it was); the drift table; the findings; the rules in force; the handover sheet's line. Pure:
plain data for ``html.soak_block`` and ``plots.small_multiples``; every verdict is read as
recorded, none is decided here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pytest_gpucluster import verdict
from pytest_gpucluster.checks.soak import TITLES, UNITS
from pytest_gpucluster.config.soak import say_duration
from pytest_gpucluster.report.inventory import plain
from pytest_gpucluster.report.plots import Line, Mark, Panel, natural

# The panels of a node's figure: every metric a cycle measures (``checks.soak.SERIES`` per GPU,
# the all_reduce per node) and the readings a person reads a soak by.
PANELS = (
    ("tflops", "GEMM, TFLOP/s"),
    ("copy_tbps", "device copy, TB/s"),
    ("busbw_gbps", "all_reduce busbw, GB/s"),
    ("sm_mhz", "SM clock, MHz"),
    ("temp_c", "temperature, C"),
    ("power_w", "power, W"),
)
# The node's all_reduce is one series per node (``busbw_gbps`` of the node's entry).
NODE_SERIES = "busbw_gbps"
ENDED = {
    "duration": "ran its length",
    "stopped": "stopped for its own failure",
    "stopped_all": "stopped with every node (fail-fast)",
    "failed": "its job failed",
    "interrupted": "interrupted with the run",
}
# The soak check's area in the results (``results.split_nodeid``): its test file's name.
AREA = "soak"
# Past this many nodes, only the nodes with something to see are drawn, this many at most.
FIGURES = 16
DRIFT_ROWS = 24
SHOWN_FINDINGS = 12
ORDER = {"fail": 0, "xpass": 0, "not_judged": 1, "fault": 1, "interrupted": 1, "warn": 2}


@dataclass(frozen=True)
class NodeRow:
    """One row of the nodes' table: a node, or (past the row limit) every node whose soak ran its
    length and passed, under their hostlist."""

    label: str
    ended: str
    soaked: str
    cycles: str
    soak_verdict: str  # the soak check's recorded outcome ("none": no check recorded)
    node_verdict: str  # the node's recorded verdict (ACCEPTED, REJECTED, ...; "" none)
    error: str = ""
    group: bool = False


@dataclass(frozen=True)
class NodeFigure:
    """One node's small multiples: the panels with a reading, the cycles failures began in, and a
    note on what was left out."""

    node: str
    panels: tuple[Panel, ...]
    marks: tuple[Mark, ...]
    caption: str
    note: str = ""


@dataclass(frozen=True)
class DriftRow:
    """One GPU's drift: first and last window, worst cycle, change; the worst severity of the
    soak's findings on it ("" none)."""

    where: str
    metric: str
    first: str
    last: str
    worst: str
    worst_cycle: str
    change: str
    status: str


@dataclass(frozen=True)
class SoakBlock:
    """Everything the soak block shows."""

    summary: str
    interrupted: bool
    rows: tuple[NodeRow, ...]
    figures: tuple[NodeFigure, ...]
    figure_notes: tuple[str, ...]
    drift: tuple[DriftRow, ...]
    drift_more: int
    early_cycles: int  # the first window: cycles 1 … this
    findings: tuple[tuple[str, str], ...]  # (severity, sentence), failures first
    rules: tuple[tuple[str, str, str], ...]  # (rule, its keys in words, source)
    stream_folder: str


def soak_verdicts(doc: Mapping[str, Any]) -> dict[str, str]:
    """Each node's soak check outcome as recorded on its test."""
    out: dict[str, str] = {}
    for t in doc.get("tests", []):
        if t.get("area") == AREA and t.get("node"):
            out[str(t["node"])] = str(t.get("verdict", "none"))
    return out


def _node_verdicts(doc: Mapping[str, Any]) -> dict[str, str]:
    verdicts = ((doc.get("acceptance") or {}).get("nodes") or {}).get("verdicts") or {}
    return {str(n): str(v.get("verdict", "")) for n, v in verdicts.items()}


def _findings(section: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return [f for f in section.get("findings") or [] if isinstance(f, Mapping)]


def _count(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def _duration(seconds: Any) -> str:
    return say_duration(float(seconds or 0.0))


def _span(values: Sequence[float], say: Callable[[Any], str] = str) -> str:
    low, high = min(values), max(values)
    return say(low) if say(low) == say(high) else f"{say(low)} – {say(high)}"


def _soaked(nodes: Sequence[Mapping[str, Any]], requested_s: float) -> str:
    done = [float(n.get("soaked_s") or 0.0) for n in nodes]
    text = f"{_span(done, _duration)} of {_duration(requested_s)}"
    # A soak that ran its length stops where its next whole cycle would not fit: no share to give.
    short = len(nodes) == 1 and nodes[0].get("ended") != "duration"
    if short and requested_s > 0 and done[0] < 0.995 * requested_s:
        text += f" ({100 * done[0] / requested_s:.0f} %)"
    return text


def node_rows(section: Mapping[str, Any], doc: Mapping[str, Any], limit: int) -> list[NodeRow]:
    """A row per node, in node order; past ``limit`` nodes, the nodes whose soak did not run its
    length and pass come first, a row each, and the rest share one row under their hostlist."""
    nodes: Mapping[str, Mapping[str, Any]] = section.get("nodes") or {}
    requested = float(section.get("requested_s") or 0.0)
    checks, verdicts = soak_verdicts(doc), _node_verdicts(doc)

    def row(name: str) -> NodeRow:
        n = nodes[name]
        ended = str(n.get("ended", ""))
        return NodeRow(
            label=name,
            ended=ENDED.get(ended, ended or "not recorded"),
            soaked=_soaked([n], requested),
            cycles=str(n.get("cycles", 0)),
            soak_verdict=checks.get(name, "none"),
            node_verdict=verdicts.get(name, ""),
            error=str(n.get("error") or ""),
        )

    names = sorted(nodes, key=natural)
    if len(names) <= limit:
        return [row(n) for n in names]
    clean = [n for n in names if nodes[n].get("ended") == "duration" and checks.get(n) == "pass"]
    others = sorted(
        (n for n in names if n not in clean), key=lambda n: (ORDER.get(checks.get(n, "none"), 3), natural(n))
    )
    rows = [row(n) for n in others]
    if clean:
        alike = [nodes[n] for n in clean]
        accepted = {verdicts.get(n, "") for n in clean}
        rows.append(
            NodeRow(
                label=f"{verdict.hostlist(clean)} ({len(clean)} nodes)",
                ended=ENDED["duration"],
                soaked=_soaked(alike, requested),
                cycles=_span([int(n.get("cycles", 0)) for n in alike]),
                soak_verdict="pass",
                node_verdict=accepted.pop() if len(accepted) == 1 else "",
                group=True,
            )
        )
    return rows


def _failing_gpus(findings: Iterable[Mapping[str, Any]], node: str) -> set[str]:
    return {
        f"gpu{f['gpu']}"
        for f in findings
        if f.get("severity", "fail") == "fail" and node in (f.get("nodes") or ()) and isinstance(f.get("gpu"), int)
    }


def _minute(gpus: Mapping[str, Mapping[str, Any]], gpu: str, cycle: int, cycle_s: float) -> float:
    """The minute since the node's start that ``cycle`` began at (its GPU's ``t``, else the
    node's first GPU's, else the cycle's length times its number)."""
    for series in (gpus.get(gpu), *gpus.values()):
        t = (series or {}).get("t") or []
        if 0 <= cycle < len(t) and isinstance(t[cycle], int | float):
            return float(t[cycle]) / 60.0
    return cycle * cycle_s / 60.0


def _read(values: Iterable[Any]) -> bool:
    return any(isinstance(v, int | float) for v in values)


def _series_of(finding: Mapping[str, Any]) -> str:
    """The series a finding's metric is of (``soak.copy_tbps.dip`` → ``copy_tbps``); "" none."""
    parts = str(finding.get("metric") or "").split(".")
    return parts[1] if len(parts) == 3 and parts[0] == "soak" else ""


def _reading(data: Mapping[str, Any], place: str, key: str, cycle: int) -> float | None:
    """The value of ``key`` in ``cycle`` on the GPU ``place`` (the node's own for its all_reduce)."""
    series = data.get(key) if key == NODE_SERIES else ((data.get("gpus") or {}).get(place) or {}).get(key)
    values = list(series or [])
    value = values[cycle] if 0 <= cycle < len(values) else None
    return float(value) if isinstance(value, int | float) else None


def node_figure(
    node: str, data: Mapping[str, Any], findings: Sequence[Mapping[str, Any]], cycle_s: float
) -> NodeFigure:
    """One node's panels: each series of ``PANELS`` that has a reading, one line per GPU (the
    all_reduce: one for the node) against minutes since the node's start; the GPUs a failing
    finding names marked, a mark at each cycle a failing finding on the node began in, and each
    warning's cycle marked amber (on its metric's panel with a ring at the value, such as a dip the
    GPU recovered from, else on every panel); the series without any reading named in the note."""
    gpus: Mapping[str, Mapping[str, Any]] = data.get("gpus") or {}
    order = sorted(gpus, key=natural)
    failing = _failing_gpus(findings, node)
    panels: list[Panel] = []
    missing: list[str] = []
    for key, title in PANELS:
        if key == NODE_SERIES:
            times = (gpus[order[0]].get("t") or []) if order else []
            values = list(data.get(key) or [])
            lines = [Line("node", [float(t) / 60.0 for t in times], values)] if _read(values) else []
        else:
            lines = [
                Line(
                    label,
                    [float(t) / 60.0 for t in gpus[label].get("t") or []],
                    list(gpus[label].get(key) or []),
                    marked=label in failing,
                )
                for label in order
                if _read(gpus[label].get(key) or [])
            ]
        if lines:
            panels.append(Panel(title, lines))
        elif key != NODE_SERIES:  # a node of one GPU runs no all_reduce: nothing missing
            missing.append(title.split(",")[0])
    marks: dict[tuple[float, str, str], Mark] = {}
    warned: list[str] = []
    for f in findings:
        severity = str(f.get("severity", "fail"))
        if severity not in ("fail", "warn") or node not in (f.get("nodes") or ()) or f.get("cycle") is None:
            continue
        place = f"gpu{f['gpu']}" if isinstance(f.get("gpu"), int) else "node"
        x = _minute(gpus, place, int(f["cycle"]), cycle_s)
        if severity == "fail":
            marks.setdefault((x, place, ""), Mark(x, f"{place} from cycle {f['cycle']}"))
            continue
        key = _series_of(f)
        panel = next((title for k, title in PANELS if k == key), "")
        if panel and panel not in [p.title for p in panels]:
            panel = ""
        y = _reading(data, place, key, int(f["cycle"])) if panel else None
        what = f"{place} {panel.split(',')[0]}" if panel else place
        marks.setdefault((x, place, panel), Mark(x, f"{place} cycle {f['cycle']}", "warn", panel, y))
        warned.append(f"{what} in cycle {f['cycle']}")
    note = ""
    if missing:
        stand_in = bool(gpus) and all(str(g.get("device", "")) == "cpu" for g in gpus.values())
        note = f"No reading of {', '.join(missing)} on this node" + (
            " (CPU ranks stand in for GPUs: nothing to read)." if stand_in else "."
        )
    cycles = int(data.get("cycles") or 0)
    caption = f"{node}: {_count(len(order), 'GPU')}, {_count(cycles, 'cycle')} over {_duration(data.get('soaked_s'))}"
    if failing:
        caption += f"; failing: {', '.join(sorted(failing, key=natural))} (red)"
    if warned:
        caption += f"; warnings (amber, dotted): {', '.join(dict.fromkeys(warned))}"
    return NodeFigure(node, tuple(panels), tuple(marks.values()), caption, note)


def figures(section: Mapping[str, Any], doc: Mapping[str, Any], limit: int) -> tuple[list[NodeFigure], list[str]]:
    """Every node's figure up to ``limit`` nodes; past it, those of the nodes with a finding or a
    soak that did not run its length and pass (failures first, at most ``FIGURES``), and a note
    naming how many others were clean."""
    nodes: Mapping[str, Mapping[str, Any]] = section.get("nodes") or {}
    found = _findings(section)
    cycle_s = float((section.get("config") or {}).get("cycle_s") or 60.0)
    checks = soak_verdicts(doc)
    names = sorted(nodes, key=natural)
    notes: list[str] = []
    if len(names) > limit:
        named = {n for f in found for n in f.get("nodes") or ()}

        def rank(n: str) -> tuple[int, list[Any]]:
            failed = any(f.get("severity", "fail") == "fail" and n in (f.get("nodes") or ()) for f in found)
            return (0 if failed else ORDER.get(checks.get(n, "none"), 3), natural(n))

        of_note = [n for n in names if n in named or nodes[n].get("ended") != "duration" or checks.get(n) != "pass"]
        clean = [n for n in names if n not in of_note]
        of_note.sort(key=rank)
        if len(of_note) > FIGURES:
            notes.append(
                f"{len(of_note) - FIGURES} more node(s) with a finding or a soak cut short are not drawn; "
                "their series are in the results file."
            )
        if clean:
            notes.append(
                f"{len(clean)} other node(s) soaked without a finding and are not drawn: "
                f"{verdict.hostlist(clean)}; their series are in the results file."
            )
        names = of_note[:FIGURES]
    drawn = [node_figure(n, nodes[n], found, cycle_s) for n in names]
    for fig in drawn:
        if not fig.panels:
            notes.append(f"{fig.node}: no cycle to draw.")
    return [f for f in drawn if f.panels], notes


def _fmt(value: Any) -> str:
    return f"{float(value):.4g}" if isinstance(value, int | float) else "–"


def _change(value: Any) -> str:
    if not isinstance(value, int | float):
        return "–"
    return "0.00 %" if abs(value) < 0.005 else f"{value:+.2f} %".replace("-", "−")


def drift_rows(section: Mapping[str, Any], limit: int = DRIFT_ROWS) -> tuple[list[DriftRow], int]:
    """Every GPU's drift row: the GPUs a failing finding names first, then warned, each group
    worst change first; at most ``limit`` rows, and how many more there were."""
    found = _findings(section)
    severity: dict[str, str] = {}
    for f in found:
        if isinstance(f.get("gpu"), int):
            for n in f.get("nodes") or ():
                where = f"{n}:gpu{f['gpu']}"
                now = str(f.get("severity", "fail"))
                if ORDER.get(now, 3) < ORDER.get(severity.get(where, ""), 3):
                    severity[where] = now
    rows: list[tuple[tuple[Any, ...], DriftRow]] = []
    for node, data in (section.get("nodes") or {}).items():
        for gpu, series in (data.get("gpus") or {}).items():
            d = series.get("drift")
            if not isinstance(d, Mapping):
                continue
            where = f"{node}:{gpu}"
            metric = str(d.get("metric", ""))
            change = d.get("change_pct")
            status = severity.get(where, "")
            rows.append(
                (
                    (
                        ORDER.get(status, 3),
                        float(change) if isinstance(change, int | float) else float("inf"),
                        natural(where),
                    ),
                    DriftRow(
                        where=where,
                        metric=f"{TITLES.get(metric, metric)}, {UNITS.get(metric, '')}".rstrip(", "),
                        first=_fmt(d.get("first")),
                        last=_fmt(d.get("last")),
                        worst=_fmt(d.get("worst")),
                        worst_cycle=str(d.get("worst_cycle", "–")),
                        change=_change(change),
                        status=status,
                    ),
                )
            )
    rows.sort(key=lambda kv: kv[0])
    return [r for _, r in rows[:limit]], max(0, len(rows) - limit)


def rules_in_force(section: Mapping[str, Any]) -> list[tuple[str, str, str]]:
    """Each rule with its keys in words and the ``source`` its numbers rest on, after the tables
    they were read from where the results name them (``[soak.cpu_rules.drift] over
    [soak.rules.drift]``: CPU ranks stood in); a rule the file does not set is said to be off."""
    out = []
    for name, rule in (section.get("rules") or {}).items():
        if not isinstance(rule, Mapping):
            out.append((str(name), "not in force", ""))
            continue
        shown = {k: v for k, v in rule.items() if k not in ("source", "tables") and v is not None}
        keys = "; ".join(f"{k} {plain(v)}" for k, v in shown.items())
        tables = " over ".join(f"[{t}]" for t in rule.get("tables") or ())
        source = ": ".join(part for part in (tables, str(rule.get("source") or "")) if part)
        out.append((str(name), keys or "any", source))
    return out


def _bytes(value: Any) -> str:
    size = float(value)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:g} {unit}"
        size /= 1024
    return f"{size:g} GiB"


# A cycle's work in words (``workloads.soak.SoakConfig``'s keys); a key not named here reads as
# ``key: value``.
CONFIG_WORDS = {
    "matmul_n": lambda v: f"GEMM {v} × {v}",
    "copy_bytes": lambda v: f"copy {_bytes(v)}",
    "collective_bytes": lambda v: f"all_reduce {_bytes(v)}",
    "sdc_every": lambda v: f"SDC every {v} cycles" if v else "no SDC",
    "sample_s": lambda v: f"NVML read every {plain(v)} s",
}


def summary(section: Mapping[str, Any]) -> str:
    """``8 h 0 min asked for on 64 nodes, cycles of 1 min (GEMM 8192 × 8192; copy 2 GiB; ...)``."""
    config = dict(section.get("config") or {})
    cycle = config.pop("cycle_s", None)
    nodes = len(section.get("nodes") or {})
    text = f"{_duration(section.get('requested_s'))} asked for on {_count(nodes, 'node')}"
    if isinstance(cycle, int | float):
        text += f", cycles of {_duration(cycle)}"
    words = [
        CONFIG_WORDS[k](v) if k in CONFIG_WORDS and isinstance(v, int | float) else f"{k}: {plain(v)}"
        for k, v in config.items()
    ]
    return text + (f" ({'; '.join(words)})" if words else "")


def block(doc: Mapping[str, Any], limit: int) -> SoakBlock | None:
    """What the soak block shows, or None when no soak ran (``doc`` has no ``soak``)."""
    section = doc.get("soak")
    if not isinstance(section, Mapping) or not section:
        return None
    drawn, notes = figures(section, doc, limit)
    drift, more = drift_rows(section)
    found = sorted(_findings(section), key=lambda f: ORDER.get(str(f.get("severity", "fail")), 3))
    return SoakBlock(
        summary=summary(section),
        interrupted=bool(section.get("interrupted")),
        rows=tuple(node_rows(section, doc, limit)),
        figures=tuple(drawn),
        figure_notes=tuple(notes),
        drift=tuple(drift),
        drift_more=more,
        early_cycles=int(((section.get("rules") or {}).get("drift") or {}).get("early_cycles") or 3),
        findings=tuple((str(f.get("severity", "fail")), str(f.get("text", ""))) for f in found),
        rules=tuple(rules_in_force(section)),
        stream_folder=str(section.get("stream_folder") or ""),
    )


def sheet_line(doc: Mapping[str, Any], per_node: int = 4) -> str:
    """The handover sheet's soak line: the length asked for, how long each node was soaked (each
    node up to ``per_node`` nodes, else the shortest and longest) and its cycles, and the nodes
    the soak check passed, failed and left unjudged on, as recorded; "" without a soak."""
    section = doc.get("soak")
    if not isinstance(section, Mapping) or not section:
        return ""
    nodes: Mapping[str, Mapping[str, Any]] = section.get("nodes") or {}
    names = sorted(nodes, key=natural)
    cycle = (section.get("config") or {}).get("cycle_s")
    text = f"{_duration(section.get('requested_s'))} asked for"
    if isinstance(cycle, int | float):
        text += f", cycles of {_duration(cycle)}"
    if section.get("interrupted"):
        text += ", interrupted"
    if not names:
        return text + "; no node soaked"
    done = [float(nodes[n].get("soaked_s") or 0.0) for n in names]
    cycles = [int(nodes[n].get("cycles") or 0) for n in names]
    if len(names) <= per_node:
        each = ", ".join(
            f"{n} {_duration(s)} ({_count(c, 'cycle')})" for n, s, c in zip(names, done, cycles, strict=True)
        )
        text += f"; soaked: {each}"
    else:
        text += f"; each node soaked {_span(done, _duration)} ({_span(cycles)} cycles)"
    checks = soak_verdicts(doc)
    passed = [n for n in names if checks.get(n) in ("pass", "warn")]
    failed = [n for n in names if checks.get(n) in ("fail", "xpass")]
    unsure = [n for n in names if n not in passed and n not in failed]
    text += f"; passed on {len(passed)} of {_count(len(names), 'node')}"
    if failed:
        text += f", failed on {verdict.hostlist(failed)}"
    if unsure:
        text += f", not judged on {verdict.hostlist(unsure)}"
    return text

"""Plots for the report, rendered offline with matplotlib's Agg/SVG backends into ``data:`` URIs
(no file, no network, no font download), so a self-contained HTML report stays one file.

Two generic kinds, driven only by the results document:

* series plots: every ``series`` entry with the same ``name`` is one plot, one line per ``where``,
  with the ``threshold`` as a dashed line (busbw against message size, throughput against GPUs);
* spread plots: every metric measured in several places (per GPU, per node) is one dot plot of
  value by place, coloured by verdict, with the fail and warn lines (TFLOP/s of every GPU);

and small multiples over time from panels another module prepares (``report/soak.py``: a node's
soak, one line per GPU, the failing ones marked).
"""

from __future__ import annotations

import base64
import io
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pytest_gpucluster.report.model import badness

STATUS_COLOURS = {"pass": "#2e7d32", "warn": "#ef8f00", "fail": "#c62828", "xfail": "#7b1fa2"}
MAX_SERIES_LINES = 24  # beyond this a legend is unreadable; the plot says how many were left out


@dataclass(frozen=True)
class Plot:
    """One rendered plot."""

    title: str
    caption: str
    data_uri: str


def _figure(width: float = 5.6, height: float = 3.3) -> Any:
    import matplotlib

    matplotlib.use("Agg", force=False)
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=100)
    fig.set_layout_engine("constrained")
    return fig


def _to_uri(fig: Any, *, compact: bool = False) -> str:
    import matplotlib

    buf = io.BytesIO()
    # Text stays text (smaller files, sharp at any zoom); the browser's sans-serif renders it.
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": "gpucluster"}):
        fig.savefig(buf, format="svg")
    svg = buf.getvalue()
    if compact:
        svg = _PATH.sub(lambda m: _DECIMALS.sub(rb"\1", m.group(0)).replace(b"\n", b""), svg)
    return "data:image/svg+xml;base64," + base64.b64encode(svg).decode("ascii")


# A path's coordinates to a tenth of a point: a figure of thousands of points halves in size and
# looks the same.
_PATH = re.compile(rb' d="[^"]*"')
_DECIMALS = re.compile(rb"(\d\.\d)\d+")


def _finite(points: Sequence[Sequence[Any]]) -> list[tuple[float, float]]:
    out = []
    for p in points:
        try:
            x, y = float(p[0]), float(p[1])
        except (TypeError, ValueError, IndexError):
            continue
        if math.isfinite(x) and math.isfinite(y):
            out.append((x, y))
    return sorted(out)


def series_plots(doc: Mapping[str, Any]) -> list[Plot]:
    """One plot per series name, one line per place; the threshold as a dashed red line."""
    groups: dict[str, list[Mapping[str, Any]]] = {}
    for t in doc.get("tests", []):
        for s in t.get("series", []):
            groups.setdefault(str(s.get("name", "series")), []).append(s)
    plots = []
    for name, members in groups.items():
        fig = _figure()
        ax = fig.add_subplot()
        drawn = 0
        for s in members[:MAX_SERIES_LINES]:
            pts = _finite(s.get("points", []))
            if not pts:
                continue
            xs, ys = zip(*pts, strict=True)
            ax.plot(xs, ys, marker="o", markersize=3, linewidth=1.4, label=str(s.get("where") or name))
            drawn += 1
        if not drawn:
            continue
        first = members[0]
        if first.get("x_log"):
            ax.set_xscale("log", base=2)
        thresholds = sorted({float(s["threshold"]) for s in members if isinstance(s.get("threshold"), int | float)})
        for i, th in enumerate(thresholds):
            ax.axhline(
                th, color=STATUS_COLOURS["fail"], linestyle="--", linewidth=1.2, label="fail line" if i == 0 else None
            )
        ax.set_xlabel(str(first.get("x_label", "")))
        ax.set_ylabel(str(first.get("y_label", "")))
        ax.set_title(name, fontsize=11)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7, loc="best", ncol=2 if drawn > 8 else 1)
        left_out = len(members) - min(len(members), MAX_SERIES_LINES)
        caption = f"{drawn} line(s) by place" + (f"; {left_out} more not drawn" if left_out else "")
        if thresholds:
            caption += "; dashed: fail line " + ", ".join(f"{t:g}" for t in thresholds)
        plots.append(Plot(name, caption, _to_uri(fig)))
    return plots


def _node_of(where: str) -> str:
    return where.split(":", 1)[0]


def spread_plots(doc: Mapping[str, Any], *, min_places: int = 3) -> list[Plot]:
    """For each metric measured in at least ``min_places`` places: value by place, coloured by
    verdict, with the fail and warn lines; places are grouped by node, so a slow GPU or node
    stands out of its row."""
    by_metric: dict[str, dict[str, Mapping[str, Any]]] = {}
    for t in doc.get("tests", []):
        for m in t.get("measurements", []):
            where = str(m.get("where", ""))
            if where and isinstance(m.get("value"), int | float) and m.get("metric") != "baseline.regression":
                seen = by_metric.setdefault(str(m.get("metric")), {})
                # Several of one metric at one place (a GPU's GEMM and copy fractions): its worst,
                # as the per-GPU map and the test's row show it.
                if where not in seen or badness(m) > badness(seen[where]):
                    seen[where] = m
    plots = []
    for metric, places in by_metric.items():
        if len(places) < min_places:
            continue
        ordered = sorted(places.items(), key=lambda kv: natural(kv[0]))
        fig = _figure(width=min(12.0, 3.6 + 0.07 * len(ordered)), height=3.3)
        ax = fig.add_subplot()
        xs = list(range(len(ordered)))
        ys = [float(m["value"]) for _, m in ordered]
        colours = [STATUS_COLOURS.get(str(m.get("status")), "#546e7a") for _, m in ordered]
        ax.scatter(xs, ys, c=colours, s=22 if len(xs) < 80 else 10, zorder=3)
        first = ordered[0][1]
        th = first.get("threshold", {})
        for key, style in (("fail_below", "--"), ("fail_above", "--"), ("warn_below", ":"), ("warn_above", ":")):
            if isinstance(th.get(key), int | float):
                colour = STATUS_COLOURS["fail" if key.startswith("fail") else "warn"]
                ax.axhline(
                    float(th[key]),
                    color=colour,
                    linestyle=style,
                    linewidth=1.2,
                    label=f"{key.split('_')[0]} line {th[key]:g}",
                )
        nodes = [_node_of(w) for w, _ in ordered]
        boundaries = [i for i in range(1, len(nodes)) if nodes[i] != nodes[i - 1]]
        for b in boundaries:
            ax.axvline(b - 0.5, color="#b0bec5", linewidth=0.8)
        if len(ordered) <= 32:
            ax.set_xticks(xs, [w for w, _ in ordered], rotation=60, ha="right", fontsize=7)
        else:
            starts = [0, *boundaries]
            ends = [*boundaries, len(nodes)]
            centres = [(s + e - 1) / 2 for s, e in zip(starts, ends, strict=True)]
            labels = [nodes[s] for s in starts]
            step = max(1, len(labels) // 32)
            ax.set_xticks(centres[::step], labels[::step], rotation=60, ha="right", fontsize=7)
        unit = str(first.get("unit", ""))
        ax.set_ylabel(unit)
        ax.set_title(f"{metric} by place", fontsize=11)
        ax.grid(True, axis="y", alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7, loc="best")
        low = min(ordered, key=lambda kv: float(kv[1]["value"]))
        high = max(ordered, key=lambda kv: float(kv[1]["value"]))
        caption = (
            f"{len(ordered)} places; lowest {low[0]} = {float(low[1]['value']):.4g} {unit}, "
            f"highest {high[0]} = {float(high[1]['value']):.4g} {unit}"
        )
        plots.append(Plot(f"{metric} by place", caption, _to_uri(fig)))
    return plots


def natural(text: str) -> list[Any]:
    # node2 before node10, gpu2 before gpu10
    return [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", text)]


# ----------------------------------------------------------------------------- small multiples

# Lines of the GPUs no failing finding names; red is kept for those a failing finding names.
QUIET_COLOURS = (
    "#1f77b4",
    "#2ca02c",
    "#9467bd",
    "#8c564b",
    "#17becf",
    "#7f7f7f",
    "#bcbd22",
    "#e377c2",
    "#4e79a7",
    "#59a14f",
)
# A panel is a few hundred pixels wide: more points than this per line add bytes, not detail.
THIN_TO = 240
FEW_POINTS = 30


@dataclass(frozen=True)
class Line:
    """One line of a panel: its label (``gpu3``), x and y (None: no value in that cycle), and
    whether it is drawn marked (red, thicker, labelled at its end)."""

    label: str
    xs: Sequence[float]
    ys: Sequence[float | None]
    marked: bool = False


@dataclass(frozen=True)
class Panel:
    """One small plot of several lines sharing an x axis with the others of its figure."""

    title: str
    lines: Sequence[Line]


@dataclass(frozen=True)
class Mark:
    """A vertical line at ``x``: dashed red across every panel for the cycle a failure began in;
    for a warning (``severity="warn"``) dotted amber on the one panel titled ``panel``, with a ring
    at ``y``, the value (a dip the GPU recovered from)."""

    x: float
    label: str
    severity: str = "fail"
    panel: str = ""  # the panel's title; "" every panel
    y: float | None = None


def thin(xs: Sequence[float], ys: Sequence[float | None], limit: int = THIN_TO) -> tuple[list[float], list[float]]:
    """At most about ``limit`` points of a line: past it, the lowest and the highest point of each
    of ``limit / 2`` buckets, in order, so a dip or a spike of one cycle stays drawn; a missing
    value is NaN (a gap in the line)."""
    values = [math.nan if y is None else float(y) for y in ys]
    if len(values) <= limit:
        return [float(x) for x in xs], values
    size = math.ceil(len(values) / max(1, limit // 2))
    out_x: list[float] = []
    out_y: list[float] = []
    for start in range(0, len(values), size):
        bucket = [i for i in range(start, min(start + size, len(values))) if not math.isnan(values[i])]
        if not bucket:
            out_x.append(float(xs[start]))
            out_y.append(math.nan)
            continue
        low = min(bucket, key=lambda i: values[i])
        high = max(bucket, key=lambda i: values[i])
        for i in sorted({low, high}):
            out_x.append(float(xs[i]))
            out_y.append(values[i])
    return out_x, out_y


def small_multiples(title: str, panels: Sequence[Panel], marks: Sequence[Mark], x_label: str) -> str:
    """One figure of small panels over the same x (two columns), one line per label in the same
    colour in every panel, marked lines red, thicker and labelled, every mark a dashed line (its
    label in the first panel), one legend under the panels. A data URI."""
    columns = 2 if len(panels) > 1 else 1
    rows = math.ceil(len(panels) / columns)
    fig = _figure(width=6.4 if columns == 2 else 4.0, height=0.9 + 1.8 * rows)
    labels = list(dict.fromkeys(line.label for p in panels for line in p.lines))
    colour = {label: QUIET_COLOURS[i % len(QUIET_COLOURS)] for i, label in enumerate(labels)}
    handles: dict[str, Any] = {}
    axes = fig.subplots(rows, columns, squeeze=False, sharex=True)
    for i, ax in enumerate(axes.flat):
        if i >= len(panels):
            ax.set_visible(False)
            continue
        panel = panels[i]
        for line in sorted(panel.lines, key=lambda line: line.marked):  # marked lines on top
            xs, ys = thin(line.xs, line.ys)
            # A few cycles show as dots too: a line of one point draws nothing.
            dots: dict[str, Any] = {"marker": "o", "markersize": 2.5} if len(xs) <= FEW_POINTS else {}
            if line.marked:
                (drawn,) = ax.plot(xs, ys, color=STATUS_COLOURS["fail"], linewidth=1.9, zorder=3, **dots)
                last = [(x, y) for x, y in zip(xs, ys, strict=True) if not math.isnan(y)]
                if last:
                    ax.annotate(
                        line.label,
                        last[-1],
                        xytext=(3, 0),
                        textcoords="offset points",
                        color=STATUS_COLOURS["fail"],
                        fontsize=7,
                        fontweight="bold",
                        va="center",
                    )
            else:
                (drawn,) = ax.plot(xs, ys, color=colour[line.label], linewidth=0.8, alpha=0.85, **dots)
            handles.setdefault(line.label + (" (fails)" if line.marked else ""), drawn)
        for mark in marks:
            if mark.panel and mark.panel != panel.title:
                continue
            tone = STATUS_COLOURS.get(mark.severity, STATUS_COLOURS["fail"])
            style = "--" if mark.severity == "fail" else ":"
            ax.axvline(mark.x, color=tone, linestyle=style, linewidth=0.9, zorder=2)
            if mark.y is not None:
                ax.plot([mark.x], [mark.y], marker="o", markersize=7, markerfacecolor="none", color=tone, zorder=4)
            if i == 0 or mark.panel:
                ax.annotate(
                    mark.label,
                    (mark.x, 1.0),
                    xycoords=("data", "axes fraction"),
                    xytext=(2, -2),
                    textcoords="offset points",
                    color=tone,
                    fontsize=6.5,
                    va="top",
                )
        ax.set_title(panel.title, fontsize=8.5, loc="left")
        ax.tick_params(labelsize=7)
        ax.grid(True, alpha=0.3)
        if i >= len(panels) - columns:
            ax.set_xlabel(x_label, fontsize=7.5)
    fig.suptitle(title, fontsize=10)
    if handles:
        fig.legend(
            list(handles.values()),
            list(handles),
            loc="outside lower center",
            ncol=min(len(handles), 8),
            fontsize=7,
            frameon=False,
            handlelength=1.5,
            columnspacing=1.0,
        )
    return _to_uri(fig, compact=True)


# ----------------------------------------------------------------------------- heatmap


def heatmap(title: str, labels: Sequence[str], cells: Sequence[Sequence[float | None]], line: float | None) -> str:
    """A square map of ``cells`` (row i, column j: the value between ``labels[i]`` and
    ``labels[j]``), pale where high and dark where low, every cell under ``line`` outlined red,
    an empty cell grey. Labels are drawn while they stay readable (up to 40); past that every
    tenth. A data URI."""
    import numpy as np
    from matplotlib.patches import Rectangle

    n = len(labels)
    values = np.array([[math.nan if v is None else float(v) for v in row] for row in cells], dtype=float)
    side = min(7.0, 2.6 + 0.09 * n)
    fig = _figure(width=side + 1.2, height=side)
    ax = fig.subplots()
    cmap = _cmap()
    image = ax.imshow(np.ma.masked_invalid(values), cmap=cmap, interpolation="nearest")
    colourbar = fig.colorbar(image, ax=ax, shrink=0.8)
    colourbar.set_label("lowest busbw, GB/s", fontsize=8)
    if line is not None:
        colourbar.ax.axhline(line, color=STATUS_COLOURS["fail"], linewidth=1.5)
        for i in range(n):
            for j in range(n):
                if not math.isnan(values[i, j]) and values[i, j] < line:
                    box = Rectangle(
                        (j - 0.5, i - 0.5), 1, 1, fill=False, edgecolor=STATUS_COLOURS["fail"], linewidth=1.2
                    )
                    ax.add_patch(box)
    step = 1 if n <= 40 else 10
    ticks = list(range(0, n, step))
    ax.set_xticks(ticks, [labels[t] for t in ticks], rotation=90, fontsize=6 if n > 16 else 8)
    ax.set_yticks(ticks, [labels[t] for t in ticks], fontsize=6 if n > 16 else 8)
    ax.set_title(title, fontsize=9)
    return _to_uri(fig, compact=True)


def _cmap() -> Any:
    import matplotlib

    return matplotlib.colormaps["viridis"].with_extremes(bad="#dddddd")


def bars(title: str, labels: Sequence[str], groups: Mapping[str, Sequence[float | None]], unit: str) -> str:
    """Horizontal bars, a row per label (top to bottom in order) and in each row a bar per group
    (a node's write and read): a missing or non-finite value leaves its bar out. A data URI."""
    n = max(1, len(groups))
    fig = _figure(height=max(1.6, 0.9 + 0.13 * len(labels) * n))
    ax = fig.add_subplot()
    height = 0.8 / n
    for k, (name, values) in enumerate(groups.items()):
        drawn = [
            (i + (k - (n - 1) / 2) * height, float(v))
            for i, v in enumerate(values)
            if v is not None and math.isfinite(v)
        ]
        if drawn:
            ys, xs = zip(*drawn, strict=True)
            ax.barh(ys, xs, height=height, label=name)
    ax.set_yticks(range(len(labels)), list(labels), fontsize=8)
    ax.set_ylim(len(labels) - 0.5, -0.5)
    ax.set_xlabel(unit)
    ax.set_title(title, fontsize=11)
    ax.grid(True, axis="x", alpha=0.3)
    if len(groups) > 1:
        ax.legend(fontsize=7, loc="best")
    return _to_uri(fig, compact=True)

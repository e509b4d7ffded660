"""Results document → the figures a customer reads at a glance: the key figures against their
lines (the handover sheet) and the per-GPU map (nodes × GPUs, one map per metric, each cell
coloured against the metric's line). Pure: plain dicts in, frozen dataclasses of formatted
strings out; no HTML.
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import PurePath
from typing import Any

from pytest_gpucluster.config.gpu_specs import share, spec_of
from pytest_gpucluster.config.metrics import METRICS
from pytest_gpucluster.report.model import (
    SOURCE_LABELS,
    badness,
    describe_threshold,
    gpu_model,
    line_of,
    measurement_value,
    threshold_origin,
    threshold_source,
)
from pytest_gpucluster.verdict import CLUSTER_ROW
from pytest_gpucluster.verdict.findings import SEVERITY, worst

_GPU_PLACE = re.compile(r"(.+):gpu(\d+)")
# Passes are shaded by how far they sit from the metric's median toward its line, in these steps:
# a GPU that passes but lags its peers reads paler than they do.
SHADES = 4


def _float(value: Any) -> float | None:
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def short_number(value: float) -> str:
    """A value in three or four figures for a map cell: ``749.6`` → ``750``, ``4.271`` → ``4.27``,
    ``0.98714`` → ``0.987``, ``41.0`` → ``41``."""
    if value == int(value) and abs(value) < 1e6:
        return str(int(value))
    if abs(value) >= 100:
        return f"{value:.0f}"
    if abs(value) >= 10:
        return f"{value:.1f}"
    return f"{value:.3g}"


def _first_line(m: Mapping[str, Any]) -> float | None:
    """The first line a measurement's value meets on its way from good to bad: warn, else fail."""
    t = line_of(m).threshold
    return next((b for b in (t.warn_below, t.fail_below, t.warn_above, t.fail_above) if b is not None), None)


def _short_source(m: Mapping[str, Any], metric: str) -> str:
    """``reference · thresholds.toml [thresholds.h100]``: what the bound rests on and the set of
    the file that holds it (the row names the metric already)."""
    where = line_of(m).threshold.source
    path, sep, key = where.partition(" [")
    if sep:
        key = key.partition("]")[0].removesuffix("." + metric).removesuffix(f'."{metric}"')
        where = f"{PurePath(path).name} [{key}]"
    label = SOURCE_LABELS[threshold_origin(m)]
    return f"{label} · {where}" if where else label


# --------------------------------------------------------------------------- key figures


@dataclass(frozen=True)
class KeyFigure:
    """One metric of the handover sheet: its worst value and where, the median, the line and
    what the line rests on."""

    metric: str
    places: int
    worst: str  # "410 TFLOP/s"
    where: str  # "gpu-033:gpu5"
    median: str
    line: str  # "fail < 600 TFLOP/s, warn < 650 TFLOP/s"
    source: str  # "reference · thresholds.toml [thresholds.h100.compute.matmul_bf16]"
    source_detail: str  # the bound's evidence in full
    status: str
    spec: str = ""  # "74 % of the 989 TFLOP/s spec": the worst value's share of the datasheet's
    # What the worst value measured, as its check recorded it: the GPU and precision, the message
    # size and ranks of a collective, the training model.
    measured: str = ""
    across: bool = False  # measured on several nodes together (a run across nodes), not on one node or GPU
    scope: str = ""  # "across nodes" where the metric has a row of each node's values beside this one


def _measured(m: Mapping[str, Any], doc: Mapping[str, Any]) -> str:
    """What measurement ``m`` measured: its recorded detail, and for a training figure the model
    the run trained (the environment's ``training_model``) where the detail does not name it."""
    detail = str(m.get("detail") or "")
    model = str((doc.get("environment") or {}).get("training_model") or "")
    if str(m.get("metric", "")).startswith("train.") and model and "param" not in detail:
        detail = f"{detail}; model {model}" if detail else f"model {model}"
    return detail


def key_figures(doc: Mapping[str, Any], limit: int = 14) -> list[KeyFigure]:
    """The speeds a cluster is bought for (every metric ``--gpucluster-calibrate`` may calibrate: FLOP/s,
    bandwidths, tokens/s, MFU, scaling) and every metric with a failure or a warning, failures
    first; at most ``limit`` rows, so the handover sheet stays one page. A metric measured on
    each node and by a run across nodes (training's tokens/s per GPU) is two rows: the worst and
    the median of one are never the other's."""
    by_metric: dict[tuple[str, bool], list[Mapping[str, Any]]] = {}
    for t in doc.get("tests", []):
        for m in t.get("measurements", []):
            if _float(m.get("value")) is None:
                continue
            judged = line_of(m)
            # A pass against a line that only proves a path is no figure of the cluster's speed.
            if judged.proves_path:
                continue
            by_metric.setdefault((judged.measurement.metric, len(judged.measurement.nodes) > 1), []).append(m)
    rows: list[tuple[int, int, KeyFigure]] = []
    gpu = gpu_model(doc)
    for order, ((metric, across), ms) in enumerate(by_metric.items()):
        status = worst(str(m.get("status", "pass")) for m in ms)
        known = METRICS.get(metric)
        if not (known and known.calibrate) and SEVERITY.get(status, 0) < SEVERITY["warn"]:
            continue
        bad = max(ms, key=badness)
        values = [v for m in ms if (v := _float(m.get("value"))) is not None]
        unit = str(bad.get("unit", ""))
        rows.append(
            (
                -SEVERITY.get(status, 0),
                order,
                KeyFigure(
                    metric=metric,
                    places=len(ms),
                    worst=measurement_value(bad),
                    where=str(bad.get("where", "")),
                    median=f"{short_number(statistics.median(values))} {unit}".rstrip() if len(values) > 1 else "",
                    line=describe_threshold(bad),
                    source=_short_source(bad, metric),
                    source_detail=threshold_source(bad),
                    status=status,
                    spec=share(bad.get("value"), unit, spec_of(gpu, metric)),
                    measured=_measured(bad, doc),
                    across=across,
                    scope="across nodes" if across and (metric, False) in by_metric else "",
                ),
            )
        )
    return [row for *_, row in sorted(rows, key=lambda r: (r[0], r[1]))][:limit]


# --------------------------------------------------------------------------- per-GPU map


@dataclass(frozen=True)
class MapCell:
    """One GPU (or node) of a map: its verdict, its value in short and in full."""

    status: str  # pass / warn / fail / ... ; "none" where nothing was measured
    text: str
    title: str
    shade: int = 0  # 0 (at or better than the median) .. SHADES - 1 (at the line), passes only


@dataclass(frozen=True)
class Map:
    """One metric over nodes × GPUs (or nodes × metrics for the per-node map)."""

    title: str  # the metric, or "per node"
    unit: str
    bounds: str
    columns: tuple[str, ...]
    rows: tuple[tuple[str, tuple[MapCell, ...]], ...]
    note: str  # "median 705 TFLOP/s; furthest from it: gpu-033:gpu5 410 TFLOP/s (58 %)"
    worst: str  # the worst status in the map


@dataclass(frozen=True)
class Uniform:
    """A metric whose every place measured the same and passed: one line, no map."""

    metric: str
    text: str  # "0 count on all 512 GPUs"


def _cell(ms: Sequence[Mapping[str, Any]], median: float | None, place: str) -> MapCell:
    m = max(ms, key=badness)
    status = str(m.get("status", "pass"))
    value = _float(m.get("value")) or 0.0
    unit = str(m.get("unit", ""))
    shade = 0
    line = _first_line(m)
    if status == "pass" and median is not None and line is not None and median != line:
        away = (median - value) / (median - line)  # 0 at the median, 1 at the line, < 0 better
        shade = max(0, min(SHADES - 1, int(away * SHADES)))
    lines = []
    for x in sorted(ms, key=badness, reverse=True):
        detail = f" ({x['detail']})" if x.get("detail") else ""
        lines.append(f"{place}: {x.get('metric')} = {measurement_value(x)}{detail}: {x.get('status')}")
    if median:
        lines.append(f"{100 * value / median:.0f} % of the median {short_number(median)} {unit}".rstrip())
    lines.append(describe_threshold(m))
    return MapCell(status, short_number(value), "\n".join(lines), shade)


def _note(cells: Iterable[tuple[str, MapCell, float]], median: float | None, unit: str, better: str) -> str:
    """``median 705 TFLOP/s; lowest: gpu-033:gpu5 410 TFLOP/s (58 % of the median)``."""
    placed = list(cells)
    if median is None or not placed or better not in ("higher", "lower"):
        return ""
    key = (lambda c: c[2]) if better == "higher" else (lambda c: -c[2])
    place, _, value = min(placed, key=key)
    share = f" ({100 * value / median:.0f} % of the median)" if median else ""
    side = "lowest" if better == "higher" else "highest"
    return f"median {short_number(median)} {unit}; {side}: {place} {short_number(value)} {unit}{share}"


def gpu_maps(doc: Mapping[str, Any]) -> tuple[list[Map], list[Uniform]]:
    """One map per metric measured on GPUs (``where`` = ``node:gpuN``): a row per node, a column
    per GPU index; where a GPU has several values of the metric, the worst stands for it. Metrics
    measured once per node (busbw inside a node, tokens/s) share one more map, a column per
    metric. A metric whose every value is the same and passed is one line instead of a map.
    Speeds come first, then the other metrics in the order the run measured them."""
    rows = ((doc.get("acceptance") or {}).get("matrix") or {}).get("rows") or []
    nodes = list(dict.fromkeys([*map(str, doc.get("nodes", [])), *(r for r in rows if r != CLUSTER_ROW)]))
    per_gpu: dict[str, dict[tuple[str, int], list[Mapping[str, Any]]]] = {}
    per_node: dict[str, dict[str, list[Mapping[str, Any]]]] = {}
    for t in doc.get("tests", []):
        for m in t.get("measurements", []):
            if _float(m.get("value")) is None:
                continue
            where, metric = str(m.get("where", "")), str(m.get("metric", ""))
            place = _GPU_PLACE.fullmatch(where)
            if place and place.group(1) in nodes:
                per_gpu.setdefault(metric, {}).setdefault((place.group(1), int(place.group(2))), []).append(m)
            elif where in nodes:
                per_node.setdefault(metric, {}).setdefault(where, []).append(m)

    def speed_first(metric: str) -> int:
        known = METRICS.get(metric)
        return 0 if known and known.calibrate else 1

    maps: list[Map] = []
    uniform: list[Uniform] = []
    for metric in sorted(per_gpu, key=speed_first):
        places = per_gpu[metric]
        made = _metric_map(metric, places, nodes)
        if isinstance(made, Uniform):
            uniform.append(made)
        else:
            maps.append(made)
    node_metrics = [
        metric
        for metric in sorted(per_node, key=speed_first)
        if not (len(per_node[metric]) > 1 and _same_and_passed(v for ms in per_node[metric].values() for v in ms))
    ]
    for metric in per_node:
        if metric not in node_metrics:
            ms = [v for vs in per_node[metric].values() for v in vs]
            uniform.append(Uniform(metric, f"{measurement_value(ms[0])} on all {len(per_node[metric])} nodes"))
    if node_metrics:
        maps.append(_node_map(node_metrics, per_node, nodes))
    return maps, uniform


def _same_and_passed(ms: Iterable[Mapping[str, Any]]) -> bool:
    ms = list(ms)
    return all(m.get("status") == "pass" for m in ms) and len({_float(m.get("value")) for m in ms}) == 1


def _metric_map(
    metric: str, places: Mapping[tuple[str, int], list[Mapping[str, Any]]], nodes: Sequence[str]
) -> Map | Uniform:
    all_ms = [m for ms in places.values() for m in ms]
    if len(places) > 1 and _same_and_passed(all_ms):
        return Uniform(metric, f"{measurement_value(all_ms[0])} on all {len(places)} GPUs")
    gpus = sorted({g for _, g in places})
    worst_of = {p: max(ms, key=badness) for p, ms in places.items()}
    values = [v for m in worst_of.values() if (v := _float(m.get("value"))) is not None]
    median = statistics.median(values) if len(values) > 1 else None
    sample = next(iter(worst_of.values()))
    unit = str(sample.get("unit", ""))
    rows = []
    placed: list[tuple[str, MapCell, float]] = []
    for node in nodes:
        if not any((node, g) in places for g in gpus):
            continue
        cells = []
        for g in gpus:
            ms = places.get((node, g))
            if not ms:
                cells.append(MapCell("none", "–", f"{node}:gpu{g}: not measured"))
                continue
            cell = _cell(ms, median, f"{node}:gpu{g}")
            cells.append(cell)
            placed.append((f"{node}:gpu{g}", cell, _float(worst_of[(node, g)].get("value")) or 0.0))
        rows.append((node, tuple(cells)))
    better = line_of(sample).threshold.better
    return Map(
        title=metric,
        unit=unit,
        bounds=describe_threshold(sample),
        columns=tuple(str(g) for g in gpus),
        rows=tuple(rows),
        note=_note(placed, median, unit, better) if len(placed) > 2 else "",
        worst=worst(c.status for _, row in rows for c in row),
    )


def _node_map(
    metrics: Sequence[str], per_node: Mapping[str, Mapping[str, list[Mapping[str, Any]]]], nodes: Sequence[str]
) -> Map:
    medians: dict[str, float | None] = {}
    for metric in metrics:
        values = [v for ms in per_node[metric].values() if (v := _float(max(ms, key=badness).get("value"))) is not None]
        medians[metric] = statistics.median(values) if len(values) > 1 else None
    rows = []
    for node in nodes:
        if not any(node in per_node[m] for m in metrics):
            continue
        cells = []
        for metric in metrics:
            ms = per_node[metric].get(node)
            cells.append(
                _cell(ms, medians[metric], node) if ms else MapCell("none", "–", f"{node}: {metric} not measured")
            )
        rows.append((node, tuple(cells)))
    return Map(
        title="per node",
        unit="",
        bounds="",
        columns=tuple(metrics),
        rows=tuple(rows),
        note="",
        worst=worst(c.status for _, row in rows for c in row),
    )

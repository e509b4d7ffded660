"""The soak, judged on the login node: the cycle records every GPU streamed (``workloads.soak``),
gathered as they arrive (``SoakTrack``), judged by the rules of ``[soak.rules]`` (for CPU ranks
standing in, ``[soak.cpu_rules]`` over them: the caller picks) and the suite's existing lines
(``judge``), and folded into the results' ``soak`` section (``section``). Pure.

Every finding is one GPU's (or, for the all_reduce and the InfiniBand ports, one node's) and one
cause's, with the cycle it began in and the time since that node's soak began:
``node7:gpu3 HW slowdown 1.4/min over 10 min from cycle 41 (0 h 41 min)``. A rule that needs
cycles in a row or a window judges only what has arrived, so the same function serves the live
early stop and the final verdict.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from pytest_gpucluster.checks.soak_rules import (
    Lines,
    baseline,
    behind_node_best,
    dips,
    drift,
    errors,
    fabric,
    memory_errors,
    sdc,
    temperatures,
    throttle,
    unwatched,
    xids,
)
from pytest_gpucluster.checks.soak_track import TITLES, UNITS, GpuTrack, SoakTrack
from pytest_gpucluster.config.soak import SoakRules, ThrottleRate, say_duration
from pytest_gpucluster.verdict import Finding

# The soak's entry points, and the parts of checks/soak_track.py and soak_rules.py its callers use.
__all__ = [
    "SERIES",
    "TITLES",
    "UNITS",
    "GpuTrack",
    "Lines",
    "SoakTrack",
    "drift_row",
    "failing_nodes",
    "judge",
    "progress",
    "section",
]

# The per-cycle series the results keep for each GPU (the report draws them over time).
SERIES = ("tflops", "copy_tbps", "sm_mhz", "temp_c", "power_w")


def judge(track: SoakTrack, rules: SoakRules, lines: Lines) -> list[Finding]:
    """Every finding of the soak so far, node by node, GPU by GPU; a finding of one of ``rules``
    carries that rule as its ``threshold``, naming the tables it was read from."""
    out: list[Finding] = []
    starts = {node: track.started(node) for node in track.nodes()}

    def by(name: str, found: list[Finding]) -> list[Finding]:
        return [replace(f, threshold=rules.threshold(name)) for f in found] if found else found

    for node in track.nodes():
        gpus = track.of_node(node)
        start = starts[node]
        if rules.behind_node_best is not None:
            out += by("behind_node_best", behind_node_best(gpus, rules.behind_node_best, start))
        for t in gpus:
            out += errors(t, start)
            out += unwatched(t)
            if rules.drift is not None:
                own = [m for m in rules.drift.metrics if m != "busbw_gbps"]
                out += by("drift", drift(t, rules.drift, start, own))
            if rules.dip is not None:
                own = [m for m in rules.dip.metrics if m != "busbw_gbps"]
                out += by("dip", dips(t, rules.dip, _longest_dip(rules), start, own))
            for name, rule, title in _throttle_rules(rules):
                out += by(name, throttle(t, rule, title, start))
            if rules.memory_errors is not None:
                out += by("memory_errors", memory_errors(t, start))
            out += temperatures(t, lines, start)
            out += fabric(t, lines.fabric, start)
        # The all_reduce spans the node's GPUs: its drift and dips are the node's, judged on its
        # first GPU.
        node_wide: list[Finding] = []
        if rules.drift is not None and "busbw_gbps" in rules.drift.metrics and gpus:
            node_wide += by("drift", drift(gpus[0], rules.drift, start, ["busbw_gbps"]))
        if rules.dip is not None and "busbw_gbps" in rules.dip.metrics and gpus:
            node_wide += by("dip", dips(gpus[0], rules.dip, _longest_dip(rules), start, ["busbw_gbps"]))
        for f in node_wide:
            out.append(
                Finding.on_node(
                    node,
                    f.text.replace(gpus[0].where, node, 1),
                    severity=f.severity,
                    cycle=f.cycle,
                    metric=f.metric,
                    value=f.value,
                    unit=f.unit,
                    threshold=f.threshold,
                )
            )
        out += xids(gpus, start)
    out += sdc(list(track.gpus.values()), starts)
    return out


def _longest_dip(rules: SoakRules) -> int:
    """A dip is shorter than the cycles in a row the drift rule fails on (3 without one)."""
    return rules.drift.cycles if rules.drift is not None else 3


def _throttle_rules(rules: SoakRules) -> list[tuple[str, ThrottleRate, str]]:
    named = [
        ("hw_slowdown", rules.hw_slowdown, "HW slowdown"),
        ("thermal", rules.thermal, "thermal slowdown"),
        ("power_brake", rules.power_brake, "HW power brake"),
    ]
    return [(name, rule, title) for name, rule, title in named if rule is not None]


def failing_nodes(findings: Iterable[Finding]) -> list[str]:
    """The nodes a failing finding convicts, in order of the findings."""
    return list(dict.fromkeys(n for f in findings for n in f.convicts))


def progress(track: SoakTrack, requested_s: float, now: float) -> str:
    """``soak 2 h 13 min of 8 h, cycle 133; node7:gpu3 −4.1 % TFLOP/s since cycle 1``: the time
    since the first node began, the cycles every node finished, and the GPU whose GEMM rate moved
    most from its first cycles."""
    nodes = track.nodes()
    if not nodes:
        return f"soak of {say_duration(requested_s)}: waiting for the first cycle"
    began = min(track.started(n) for n in nodes if track.started(n)) if any(track.started(n) for n in nodes) else now
    cycle = min(track.cycles(n) for n in nodes)
    line = f"soak {say_duration(max(0.0, now - began))} of {say_duration(requested_s)}, cycle {cycle}"
    moved = []
    for t in track.gpus.values():
        values = t.values("tflops")
        base = baseline(values, min(3, max(1, len(values) - 1)))
        if base and values and values[-1] is not None and len(values) > 1:
            moved.append((values[-1] / base - 1, t.where))
    if moved:
        change, where = min(moved)
        line += f"; {where} {100 * change:+.1f} % TFLOP/s since cycle 1"
    return line


def drift_row(track: GpuTrack, early: int, metric: str = "tflops") -> dict[str, Any] | None:
    """One GPU's line of the drift table: the median of its first window (cycles 1 … ``early``)
    and of its last, its worst cycle and the change from first to last."""
    values = [(i, v) for i, v in enumerate(track.values(metric)) if v is not None]
    if len(values) < 2:
        return None
    first = [v for i, v in values if 1 <= i <= early] or [values[0][1]]
    last = [v for _, v in values[-max(1, early) :]]
    worst_i, worst = min(values, key=lambda iv: iv[1])
    a, b = statistics.median(first), statistics.median(last)
    return {
        "metric": metric,
        "first": round(a, 4),
        "last": round(b, 4),
        "worst": round(worst, 4),
        "worst_cycle": int(track.cycles[worst_i].get("cycle", worst_i)),
        "change_pct": round(100 * (b / a - 1), 2) if a else None,
    }


def _sparse(cycles: Sequence[Mapping[str, Any]]) -> dict[str, list[list[float]]]:
    """Throttling per reason, only the cycles that had any: ``[cycle, events, seconds]``."""
    out: dict[str, list[list[float]]] = {}
    for c in cycles:
        for reason, (events, seconds) in (c.get("throttle") or {}).items():
            out.setdefault(reason, []).append([int(c.get("cycle", 0)), events, seconds])
    return out


def section(
    track: SoakTrack,
    *,
    requested_s: float,
    config: Mapping[str, Any],
    rules: SoakRules,
    nodes: Mapping[str, Mapping[str, Any]],
) -> dict[str, Any]:
    """The results' ``soak`` section: what was asked, the rules, and per node how it ended, how long
    it was soaked and its cycles, and per GPU its series per cycle (``SERIES``, seconds since the
    node's start in ``t``), its throttling (only cycles that had any), Xids and drift row. The
    per-second readings stay in the job folders; the soak's findings go after these, as the
    results encode them (``results.codec``)."""
    early = rules.drift.early_cycles if rules.drift is not None else 3
    out_nodes: dict[str, Any] = {}
    for node in sorted({*track.nodes(), *nodes}):
        start = track.started(node)
        gpus: dict[str, Any] = {}
        busbw: list[float | None] = []
        for t in track.of_node(node):
            series: dict[str, Any] = {
                "device": t.device,
                **{k: t.initial[k] for k in ("driver", "cuda") if t.initial.get(k)},
                "t": [round(float(c.get("t0", start)) - start, 1) for c in t.cycles],
            }
            for key in SERIES:
                series[key] = [c.get(key) for c in t.cycles]
            throttling = _sparse(t.cycles)
            if throttling:
                series["throttle"] = throttling
            events = [dict(e, cycle=c.get("cycle")) for c in t.cycles for e in c.get("xids") or ()]
            if events:
                series["xids"] = events
            row = drift_row(t, early)
            if row is not None:
                series["drift"] = row
            gpus[t.gpu] = series
            if not busbw:
                busbw = [c.get("busbw_gbps") for c in t.cycles]
        out_nodes[node] = {
            **dict(nodes.get(node) or {}),
            "started": round(start, 3) if start else None,
            "soaked_s": round(track.soaked_s(node), 1),
            "cycles": track.cycles(node),
            "busbw_gbps": busbw if any(v is not None for v in busbw) else [],
            "gpus": gpus,
        }
    return {
        "requested_s": requested_s,
        "config": dict(config),
        "rules": rules.to_json(),
        "nodes": out_nodes,
    }

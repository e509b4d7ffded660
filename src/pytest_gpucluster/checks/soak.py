"""The soak, judged on the login node: the cycle records every GPU streamed (``workloads.soak``),
gathered as they arrive (``SoakTrack``), judged by the rules of ``[soak.rules]`` and the suite's
existing lines (``judge``), and folded into the results' ``soak`` section (``section``). Pure.

Every finding is one GPU's (or, for the all_reduce and the InfiniBand ports, one node's) and one
cause's, with the cycle it began in and the time since that node's soak began:
``node7:gpu3 HW slowdown 1.4/min over 10 min from cycle 41 (0 h 41 min)``. A rule that needs
cycles in a row or a window judges only what has arrived, so the same function serves the live
early stop and the final verdict.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from pytest_gpucluster.checks.xid import gpu_order, kind_of
from pytest_gpucluster.config.fabric_rules import FAMILY_OF, FabricRule
from pytest_gpucluster.config.soak import BehindNodeBest, Dip, Drift, SoakRules, ThrottleRate, say_duration
from pytest_gpucluster.verdict import Finding

UNITS = {"tflops": "TFLOP/s", "copy_tbps": "TB/s", "busbw_gbps": "GB/s"}
TITLES = {"tflops": "GEMM", "copy_tbps": "device copy", "busbw_gbps": "all_reduce busbw"}
# The per-cycle series the results keep for each GPU (the report draws them over time).
SERIES = ("tflops", "copy_tbps", "sm_mhz", "temp_c", "power_w")


def gpu_index(label: str) -> int | None:
    """The NVML index of a ``gpuN`` label; None for a CPU rank standing in (``cpuR``)."""
    return int(label[3:]) if label.startswith("gpu") and label[3:].isdigit() else None


@dataclass
class GpuTrack:
    """One GPU's (or CPU rank's) stream so far."""

    node: str
    gpu: str
    device: str = ""
    started: float = 0.0  # epoch s of its start record
    initial: dict[str, Any] = field(default_factory=dict)  # its start record (counters before cycle 0)
    cycles: list[dict[str, Any]] = field(default_factory=list)
    end: dict[str, Any] | None = None

    @property
    def where(self) -> str:
        return f"{self.node}:{self.gpu}"

    def values(self, metric: str) -> list[float | None]:
        """The metric in every cycle (None where a cycle lacks it)."""
        return [_number(c.get(metric)) for c in self.cycles]


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and math.isfinite(value) else None


class SoakTrack:
    """The soak's records as they arrive from every GPU's stream."""

    def __init__(self) -> None:
        self.gpus: dict[tuple[str, str], GpuTrack] = {}

    def add(self, records: Iterable[Mapping[str, Any]]) -> int:
        """Take stream records; the number of new cycles among them."""
        new = 0
        for r in records:
            node, gpu = str(r.get("node", "")), str(r.get("gpu", ""))
            kind = r.get("kind")
            track = self.gpus.setdefault((node, gpu), GpuTrack(node, gpu))
            if kind == "end":
                track.end = dict(r)
            elif kind == "start":
                track.device, track.started, track.initial = str(r.get("device", "")), float(r["t"]), dict(r)
            elif kind == "cycle":
                track.cycles.append(dict(r))
                new += 1
        return new

    def nodes(self) -> list[str]:
        return sorted({node for node, _ in self.gpus})

    def of_node(self, node: str) -> list[GpuTrack]:
        return sorted((t for (n, _), t in self.gpus.items() if n == node), key=lambda t: gpu_order(t.gpu))

    def started(self, node: str) -> float:
        """When the node's soak began (its first start record), epoch s; 0 before any."""
        starts = [t.started for t in self.of_node(node) if t.started]
        return min(starts) if starts else 0.0

    def cycles(self, node: str) -> int:
        """The node's finished cycles: those every one of its GPUs finished."""
        counts = [len(t.cycles) for t in self.of_node(node)]
        return min(counts) if counts else 0

    def soaked_s(self, node: str) -> float:
        """How long the node was soaked: its start to the end of its last finished cycle."""
        ends = [float(t.cycles[-1]["t1"]) for t in self.of_node(node) if t.cycles and "t1" in t.cycles[-1]]
        start = self.started(node)
        return max(0.0, max(ends) - start) if ends and start else 0.0


def when(cycle: Mapping[str, Any], start: float) -> str:
    """``cycle 41 (0 h 41 min)``: the cycle and its start since the node's soak began."""
    offset = max(0.0, float(cycle.get("t0", start)) - start)
    minutes = int(offset // 60)
    since = f"{minutes // 60} h {minutes % 60} min" if minutes else f"{offset:.0f} s"
    return f"cycle {cycle.get('cycle')} ({since})"


@dataclass(frozen=True)
class Lines:
    """The suite's existing lines a soak judges by: GPU and memory temperature (fail, warn and
    source, from the run's threshold set; None: no such bound) and the profile's fabric rules."""

    temperature: tuple[float | None, float | None, str] | None = None
    memory_temperature: tuple[float | None, float | None, str] | None = None
    fabric: Mapping[str, FabricRule] = field(default_factory=dict)


def _runs(flags: Sequence[bool], length: int) -> int | None:
    """The index where the first run of ``length`` consecutive true flags begins, or None."""
    run = 0
    for i, flag in enumerate(flags):
        run = run + 1 if flag else 0
        if run >= length:
            return i - length + 1
    return None


def _on(track: GpuTrack, text: str, severity: str, cycle: Mapping[str, Any], **more: Any) -> Finding:
    return Finding.on_node(
        track.node,
        text,
        gpu=gpu_index(track.gpu),
        severity=severity,  # type: ignore[arg-type]
        cycle=int(cycle.get("cycle", 0)),
        **more,
    )


def behind_node_best(gpus: Sequence[GpuTrack], rule: BehindNodeBest, start: float) -> list[Finding]:
    """Each GPU below its node's best GPU of the same cycle by more than the tolerance in
    ``rule.cycles`` cycles in a row; the first such run, per GPU and metric."""
    out: list[Finding] = []
    if len(gpus) < 2:
        return out
    for metric in rule.metrics:
        per_gpu = {t.gpu: t.values(metric) for t in gpus}
        count = min(len(v) for v in per_gpu.values())
        best = []
        for c in range(count):
            present = [(v[c], g) for g, v in per_gpu.items() if v[c] is not None]
            best.append(max(present) if present else (None, ""))
        for t in gpus:
            values = per_gpu[t.gpu][:count]
            low = [
                v is not None and b is not None and b > 0 and v < (1 - rule.tolerance) * b
                for v, (b, _) in zip(values, best, strict=True)
            ]
            first = _runs(low, rule.cycles)
            if first is None:
                continue
            value, (top, top_gpu) = values[first], best[first]
            assert value is not None and top is not None
            share = 100 * (1 - value / top)
            text = (
                f"{t.where} {TITLES[metric]} {value:.4g} {UNITS[metric]} is {share:.1f} % below its node's best GPU "
                f"({top_gpu}, {top:.4g}) in {rule.cycles} cycles in a row from {when(t.cycles[first], start)}"
            )
            out.append(
                _on(
                    t,
                    text,
                    "fail",
                    t.cycles[first],
                    metric=f"soak.{metric}.vs_node_best",
                    value=round(value / top, 4),
                    unit="ratio",
                )
            )
    return out


def baseline(values: Sequence[float | None], early: int) -> float | None:
    """A GPU's own start: the median of cycles 1 … ``early`` (cycle 0 warms up), or None before
    they have all arrived."""
    if len(values) <= early:
        return None
    window = [v for v in values[1 : early + 1] if v is not None]
    return statistics.median(window) if window else None


def drift(track: GpuTrack, rule: Drift, start: float, metrics: Sequence[str]) -> list[Finding]:
    """The GPU below its own start by more than ``rule.fail`` (else ``rule.warn``) in
    ``rule.cycles`` cycles in a row, after its early cycles."""
    out: list[Finding] = []
    for metric in metrics:
        values = track.values(metric)
        base = baseline(values, rule.early_cycles)
        if base is None or base <= 0:
            continue
        later = values[rule.early_cycles + 1 :]
        for severity, line in (("fail", rule.fail), ("warn", rule.warn)):
            first = _runs([v is not None and v < (1 - line) * base for v in later], rule.cycles)
            if first is None:
                continue
            index = rule.early_cycles + 1 + first
            value = values[index]
            assert value is not None
            drop = 100 * (1 - value / base)
            text = (
                f"{track.where} {TITLES[metric]} {value:.4g} {UNITS[metric]} is {drop:.1f} % below its own start "
                f"({base:.4g}, cycles 1-{rule.early_cycles}) in {rule.cycles} cycles in a row from "
                f"{when(track.cycles[index], start)}"
            )
            out.append(
                _on(
                    track,
                    text,
                    severity,
                    track.cycles[index],
                    metric=f"soak.{metric}.drift",
                    value=round(value / base, 4),
                    unit="ratio",
                )
            )
            break  # the fail line, else the warn line: one finding per metric
    return out


@dataclass(frozen=True)
class DipSpan:
    """Cycles in a row below the dip line: the first and the lowest (indices into the GPU's
    cycles) and the first cycle back above it (None: the soak ended in the dip)."""

    first: int
    lowest: int
    back: int | None


def dip_spans(values: Sequence[float | None], line: float, longest: int) -> list[DipSpan]:
    """Every run of fewer than ``longest`` cycles below ``line`` after cycle 0 (a cycle without
    the value ends a run); a longer run is a fall, which the drift rule judges."""
    spans: list[DipSpan] = []
    i = 1
    while i < len(values):
        if values[i] is None or values[i] >= line:  # type: ignore[operator]
            i += 1
            continue
        j = i
        while j + 1 < len(values) and (v := values[j + 1]) is not None and v < line:
            j += 1
        if j - i + 1 < longest:
            lowest = min(range(i, j + 1), key=lambda k: values[k])  # type: ignore[arg-type,return-value]
            spans.append(DipSpan(i, lowest, j + 1 if j + 1 < len(values) else None))
        i = j + 1
    return spans


def dips(track: GpuTrack, rule: Dip, longest: int, start: float, metrics: Sequence[str]) -> list[Finding]:
    """Each metric's deepest dip on the GPU below ``rule.warn`` of its own level (the median of
    its cycles after cycle 0) that lasted fewer than ``longest`` cycles, with how many more there
    were: a warning with the depth and the cycle it was back in, never a failure. CPU ranks
    standing in for GPUs are not judged by it."""
    out: list[Finding] = []
    if track.device == "cpu":
        return out  # a CPU rank standing in follows whatever else the machine runs: no GPU's dip
    for metric in metrics:
        values = track.values(metric)
        settled = [v for v in values[1:] if v is not None]
        if len(settled) < 3:
            continue
        level = statistics.median(settled)
        if level <= 0:
            continue
        spans = dip_spans(values, (1 - rule.warn) * level, longest)
        if not spans:
            continue
        deepest = min(spans, key=lambda s: values[s.lowest])  # type: ignore[arg-type,return-value]
        low = values[deepest.lowest]
        assert low is not None
        unit = UNITS[metric]
        text = (
            f"{track.where} {TITLES[metric]} {low:.4g} {unit} in {when(track.cycles[deepest.lowest], start)}, "
            f"{100 * (low / level - 1):+.0f} % from its level {level:.4g}"
        ).replace(" -", " −")
        if deepest.back is not None:
            again = values[deepest.back]
            assert again is not None
            # A recovery short of the level says how far short, so "back" is not read as "whole".
            short = f" ({100 * (again / level - 1):+.0f} %)".replace("-", "−") if again < 0.98 * level else ""
            text += f", back to {again:.4g}{short} in cycle {track.cycles[deepest.back].get('cycle')}"
        else:
            text += ", still down when the soak ended"
        others = [track.cycles[s.first].get("cycle") for s in spans if s is not deepest]
        if others:
            text += f"; {len(others)} more dip(s) past {100 * rule.warn:g} % in cycle(s) {', '.join(map(str, others))}"
        out.append(
            _on(
                track,
                text,
                "warn",
                track.cycles[deepest.lowest],
                metric=f"soak.{metric}.dip",
                value=round(low / level, 4),
                unit="ratio",
            )
        )
    return out


def throttle(track: GpuTrack, rule: ThrottleRate, title: str, start: float) -> list[Finding]:
    """Readings with one of ``rule.reasons`` set (one a second), per minute of a window of
    ``rule.window_min`` minutes, for every window that ends at a cycle's end (as gpud counts
    events over its window: a soak shorter than the window is judged as if the window were
    whole, so a burst early on weighs what it weighs later): the first window at the fail line,
    else the first at the warn line."""
    cycles = track.cycles
    events = [sum(float((c.get("throttle") or {}).get(r, [0, 0])[1]) for r in rule.reasons) for c in cycles]
    window = rule.window_min * 60
    found: dict[str, tuple[float, int]] = {}
    i = 0
    for j, c in enumerate(cycles):
        end = float(c.get("t1", c.get("t0", 0.0)))
        while i < j and float(cycles[i].get("t0", 0.0)) < end - window:
            i += 1
        count = sum(events[i : j + 1])
        if not count:
            continue
        rate = count / rule.window_min
        first = next(k for k in range(i, j + 1) if events[k])
        for severity, line in (("fail", rule.fail_per_min), ("warn", rule.warn_per_min)):
            if line is not None and rate >= line and severity not in found:
                found[severity] = (rate, first)
        if "fail" in found:
            break
    for severity in ("fail", "warn"):
        if severity in found:
            rate, first = found[severity]
            text = (
                f"{track.where} {title} {rate:.1f}/min over {say_duration(window)} from "
                f"{when(cycles[first], start)} (a reading a second; line {_line(rule, severity)}/min)"
            )
            return [
                _on(track, text, severity, cycles[first], metric="soak.throttle", value=round(rate, 3), unit="1/min")
            ]
    return []


def _line(rule: ThrottleRate, severity: str) -> str:
    value = rule.fail_per_min if severity == "fail" else rule.warn_per_min
    return f"{value:g}"


def memory_errors(track: GpuTrack, start: float) -> list[Finding]:
    """A new uncorrectable ECC error since the soak began, a pending or failed row remap, a page
    pending retirement: the first cycle that shows each."""
    out: list[Finding] = []
    before = track.initial.get("ecc_unc")
    seen: set[str] = set()
    for c in track.cycles:
        unc = c.get("ecc_unc")
        if "ecc" not in seen and isinstance(unc, int) and isinstance(before, int) and unc > before:
            seen.add("ecc")
            out.append(
                _on(
                    track,
                    f"{track.where} {unc - before} new uncorrectable ECC error(s) in {when(c, start)}",
                    "fail",
                    c,
                )
            )
        for key, words in (
            ("remap_pending", "a row remap pending (reset the GPU)"),
            ("remap_failed", "a failed row remap (have the GPU serviced)"),
            ("retired_pending", "pages pending retirement (reset the GPU)"),
        ):
            if key not in seen and int(c.get(key) or 0) > 0:
                seen.add(key)
                out.append(_on(track, f"{track.where} {words} in {when(c, start)}", "fail", c))
    return out


def xids(gpus: Sequence[GpuTrack], start: float) -> list[Finding]:
    """The node's Xid events (its first task's records): a reset-class Xid fails its GPU, any other
    warns (``checks.xid``'s table), each said once per GPU and Xid."""
    by_index = {gpu_index(t.gpu): t for t in gpus}
    out: list[Finding] = []
    said: set[tuple[Any, int]] = set()
    for t in gpus:
        for c in t.cycles:
            for event in c.get("xids") or ():
                xid, index = int(event.get("xid", 0)), event.get("gpu")
                if (index, xid) in said:
                    continue
                said.add((index, xid))
                owner = by_index.get(index) or t
                kind = kind_of(xid)
                place = (
                    owner.where if index in by_index else f"{t.node}" + (f":gpu{index}" if index is not None else "")
                )
                text = f"{place} Xid {xid} ({kind.meaning}; {kind.action}) in {when(c, start)}"
                severity = "fail" if kind.fails else "warn"
                if index in by_index:
                    out.append(_on(owner, text, severity, c))
                else:
                    out.append(Finding.on_node(t.node, text, severity=severity, cycle=int(c.get("cycle", 0))))  # type: ignore[arg-type]
    return out


def fabric(track: GpuTrack, rules: Mapping[str, FabricRule], start: float) -> list[Finding]:
    """Fabric error counters between consecutive cycles (and from the start record to cycle 0),
    each family judged by its rate over that cycle (``config.fabric_rules``); the first cycle at
    a family's fail line, else its warn line, per port or GPU and family."""
    out: list[Finding] = []
    said: set[tuple[str, str]] = set()
    previous: Mapping[str, Any] = track.initial.get("fabric") or {}
    prev_t = track.started
    for c in track.cycles:
        now = c.get("fabric") or {}
        seconds = max(float(c.get("t1", prev_t)) - prev_t, 1.0)
        for kind, places in now.items():
            for place, counters in places.items():
                old = (previous.get(kind) or {}).get(place) or {}
                rises: dict[str, int] = {}
                for counter, value in counters.items():
                    family = FAMILY_OF.get(counter)
                    if family is None or counter not in old:
                        continue
                    rises[family] = rises.get(family, 0) + max(0, int(value) - int(old[counter]))
                for family, rise in rises.items():
                    rule = rules.get(family)
                    status = rule.status(rise, seconds) if rule is not None else "note"
                    if rule is None or status == "note" or (place, family) in said:
                        continue
                    said.add((place, family))
                    where = f"{track.node} {place}" if kind == "ib" else f"{track.where} NVLink {place}"
                    rate = rule.rate(rise, seconds)
                    text = f"{where} {rule.title} +{rise} ({rate:.3g}/{rule.per}) in {when(c, start)}"
                    text += f"; line {rule.lines()}"
                    port = place if kind == "ib" else f"link {place}"
                    gpu = gpu_index(track.gpu) if kind == "nvlink" else None
                    out.append(
                        Finding.on_node(
                            track.node, text, gpu=gpu, port=port, severity=status, cycle=int(c.get("cycle", 0))
                        )
                    )  # type: ignore[arg-type]
        if now:
            previous, prev_t = now, float(c.get("t1", prev_t))
    return out


def temperatures(track: GpuTrack, lines: Lines, start: float) -> list[Finding]:
    """The first cycle whose highest GPU (or memory) temperature is above the threshold set's fail
    line, else its warn line."""
    out: list[Finding] = []
    for key, line, what in (("temp_c", lines.temperature, "GPU"), ("mem_temp_c", lines.memory_temperature, "memory")):
        if line is None:
            continue
        fail, warn, source = line
        for severity, bound in (("fail", fail), ("warn", warn)):
            if bound is None:
                continue
            hot = next((c for c in track.cycles if _number(c.get(key)) is not None and float(c[key]) > bound), None)
            if hot is not None:
                text = f"{track.where} {what} temperature {hot[key]} C in {when(hot, start)}"
                text += f", above {bound:g} C ({source})"
                out.append(_on(track, text, severity, hot, metric=f"soak.{key}", value=float(hot[key]), unit="C"))
                break
    return out


def sdc(tracks: Sequence[GpuTrack], starts: Mapping[str, float]) -> list[Finding]:
    """Every SDC digest a GPU computed against its model's majority digest over the whole soak,
    and against its own first one (the chain is the same every time): the first cycle whose
    digest differs, per GPU."""
    by_model: dict[str, dict[str, int]] = {}
    for t in tracks:
        for c in t.cycles:
            if c.get("sdc"):
                votes = by_model.setdefault(t.device, {})
                votes[c["sdc"]] = votes.get(c["sdc"], 0) + 1
    majority = {model: max(votes.items(), key=lambda kv: kv[1])[0] for model, votes in by_model.items() if votes}
    out: list[Finding] = []
    for t in tracks:
        first = next((c["sdc"] for c in t.cycles if c.get("sdc")), None)
        for c in t.cycles:
            digest = c.get("sdc")
            if not digest:
                continue
            against = (
                "its model's majority"
                if digest != majority.get(t.device)
                else "its own first result"
                if digest != first
                else ""
            )
            if against:
                began = when(c, starts.get(t.node, 0.0))
                text = f"{t.where} SDC chain result differs from {against} ({t.device}) in {began}"
                out.append(_on(t, text, "fail", c))
                break
    return out


def unwatched(track: GpuTrack) -> list[Finding]:
    """A GPU (not a CPU rank standing in) that NVML never read during its cycles: its throttling,
    temperatures and memory errors are not judged, and the soak says so (never a pass)."""
    if track.device in ("", "cpu") or not track.cycles or any(int(c.get("samples") or 0) for c in track.cycles):
        return []
    said = next((c["nvml_errors"][0] for c in track.cycles if c.get("nvml_errors")), "no reading")
    text = (
        f"{track.where}: NVML gave no reading in {len(track.cycles)} cycles ({said}): its throttling, "
        "temperatures and memory errors are not judged"
    )
    return [Finding.on_node(track.node, text, gpu=gpu_index(track.gpu), severity="not_judged")]


def errors(track: GpuTrack, start: float) -> list[Finding]:
    """A cycle that raised on the GPU (a CUDA or NCCL error): the node's fault, said with it."""
    broken = next((c for c in track.cycles if c.get("error")), None)
    if broken is None:
        return []
    return [_on(track, f"{track.where} {when(broken, start)} failed: {broken['error']}", "fail", broken)]


def judge(track: SoakTrack, rules: SoakRules, lines: Lines) -> list[Finding]:
    """Every finding of the soak so far, node by node, GPU by GPU."""
    out: list[Finding] = []
    starts = {node: track.started(node) for node in track.nodes()}
    for node in track.nodes():
        gpus = track.of_node(node)
        start = starts[node]
        if rules.behind_node_best is not None:
            out += behind_node_best(gpus, rules.behind_node_best, start)
        for t in gpus:
            out += errors(t, start)
            out += unwatched(t)
            if rules.drift is not None:
                out += drift(t, rules.drift, start, [m for m in rules.drift.metrics if m != "busbw_gbps"])
            if rules.dip is not None:
                own = [m for m in rules.dip.metrics if m != "busbw_gbps"]
                out += dips(t, rules.dip, _longest_dip(rules), start, own)
            for rule, title in _throttle_rules(rules):
                out += throttle(t, rule, title, start)
            if rules.memory_errors is not None:
                out += memory_errors(t, start)
            out += temperatures(t, lines, start)
            out += fabric(t, lines.fabric, start)
        # The all_reduce spans the node's GPUs: its drift and dips are the node's, judged on its
        # first GPU.
        node_wide: list[Finding] = []
        if rules.drift is not None and "busbw_gbps" in rules.drift.metrics and gpus:
            node_wide += drift(gpus[0], rules.drift, start, ["busbw_gbps"])
        if rules.dip is not None and "busbw_gbps" in rules.dip.metrics and gpus:
            node_wide += dips(gpus[0], rules.dip, _longest_dip(rules), start, ["busbw_gbps"])
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
                )
            )
        out += xids(gpus, start)
    out += sdc(list(track.gpus.values()), starts)
    return out


def _longest_dip(rules: SoakRules) -> int:
    """A dip is shorter than the cycles in a row the drift rule fails on (3 without one)."""
    return rules.drift.cycles if rules.drift is not None else 3


def _throttle_rules(rules: SoakRules) -> list[tuple[ThrottleRate, str]]:
    pairs = [
        (rules.hw_slowdown, "HW slowdown"),
        (rules.thermal, "thermal slowdown"),
        (rules.power_brake, "HW power brake"),
    ]
    return [(rule, title) for rule, title in pairs if rule is not None]


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
    findings: Sequence[Finding],
    *,
    requested_s: float,
    config: Mapping[str, Any],
    rules: SoakRules,
    nodes: Mapping[str, Mapping[str, Any]],
) -> dict[str, Any]:
    """The results' ``soak`` section: what was asked, the rules, and per node how it ended, how long
    it was soaked and its cycles, and per GPU its series per cycle (``SERIES``, seconds since the
    node's start in ``t``), its throttling (only cycles that had any), Xids and drift row. The
    per-second readings stay in the job folders."""
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
        "rules": {f.name: (asdict(v) if (v := getattr(rules, f.name)) is not None else None) for f in fields(rules)},
        "nodes": out_nodes,
        "findings": [f.to_json() for f in findings],
    }

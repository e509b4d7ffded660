"""The soak's rules, one function each: the rules of ``[soak.rules]`` (a GPU behind its node's best,
drift from its own start, dips it recovered from, throttling rates, memory errors) and the suite's
existing lines a soak also judges by (temperatures, fabric counters, Xids, SDC digests), each
turning a GPU's (or a node's) cycles so far into findings that name the GPU, the cause and the
cycle it began in. ``checks.soak.judge`` applies them. Pure.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pytest_gpucluster.checks.soak_track import TITLES, UNITS, GpuTrack, gpu_index, number, when
from pytest_gpucluster.checks.xid import kind_of
from pytest_gpucluster.config.fabric_rules import FAMILY_OF, FabricRule
from pytest_gpucluster.config.soak import BehindNodeBest, Dip, Drift, ThrottleRate, say_duration
from pytest_gpucluster.verdict import Finding


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
    a family's fail line, else its warn line, per port or GPU and family (a family that warned
    first and failed later is said at the cycle it failed)."""
    first: dict[tuple[str, str, str], tuple[str, Finding]] = {}  # (kind, place, family) → status, finding
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
                    said = first.get((kind, place, family))
                    if (
                        rule is None
                        or status == "note"
                        or (said is not None and (said[0] == "fail" or status == "warn"))
                    ):
                        continue
                    # A port of the node, an NVLink of the GPU, or the GPU's own PCIe link.
                    where, port, gpu = {
                        "ib": (f"{track.node} {place}", place, None),
                        "nvlink": (f"{track.where} NVLink {place}", f"link {place}", gpu_index(track.gpu)),
                    }.get(kind, (track.where, "", gpu_index(track.gpu)))
                    rate = rule.rate(rise, seconds)
                    text = f"{where} {rule.title} +{rise} ({rate:.3g}/{rule.per}) in {when(c, start)}"
                    text += f"; line {rule.lines()}"
                    found = Finding.on_node(
                        track.node, text, gpu=gpu, port=port, severity=status, cycle=int(c.get("cycle", 0))
                    )  # type: ignore[arg-type]
                    first[(kind, place, family)] = (status, found)
        if now:
            previous, prev_t = now, float(c.get("t1", prev_t))
    return sorted((f for _, f in first.values()), key=lambda f: f.cycle or 0)


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
            hot = next((c for c in track.cycles if number(c.get(key)) is not None and float(c[key]) > bound), None)
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

"""Telemetry, analysed on the login node: what the sampler of ``workloads.telemetry`` recorded
on each node (``NodeTelemetry``) turned into problems and report series. Pure, and tested on
recorded series: a GPU idling while its peers work, clock throttling for reasons an operator
must act on, and GPU series that came back empty.
"""

from __future__ import annotations

import statistics
from bisect import bisect_left
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pytest_gpucluster.workloads.telemetry import DEFAULT_INTERVAL_S, GPU_METRICS, NodeTelemetry

MAX_POINTS = 600  # per recorded series; longer runs are thinned so the results file stays small
UNITS = {
    "util": "%",
    "sm_clock": "MHz",
    "mem_used": "MiB",
    "power": "W",
    "temperature": "C",
    "cpu_util": "%",
    "mem_used_pct": "%",
}

# Clock-event reasons an operator must act on (NVML bit → words). SW power cap and GPU idle are
# how a healthy GPU under load or at rest looks, so they are not flagged.
BAD_THROTTLE = {
    0x8: "HW slowdown",
    0x20: "SW thermal slowdown",
    0x40: "HW thermal slowdown",
    0x80: "HW power brake slowdown",
}
# A GPU counts as idle below this utilisation, its peers as busy from this median utilisation.
IDLE_BELOW_PCT = 10.0
BUSY_FROM_PCT = 50.0


@dataclass(frozen=True)
class IdleFraction:
    """How often one GPU idled while the median of its peers was busy."""

    where: str
    percent: float
    idle_samples: int
    peer_busy_samples: int

    @property
    def detail(self) -> str:
        """Words for the measurement's detail field."""
        return f"idle in {self.idle_samples} of {self.peer_busy_samples} samples while its peers were busy"


def absolute_util(telemetry: Sequence[NodeTelemetry]) -> dict[str, list[tuple[float, float]]]:
    """Every GPU's utilisation series on one clock (Unix time), keyed ``node:gpuN``."""
    out: dict[str, list[tuple[float, float]]] = {}
    for nt in telemetry:
        for gpu, series in nt.gpus.items():
            out[f"{nt.node}:{gpu}"] = [(nt.t0 + t, v) for t, v in series.get("util", [])]
    return out


def _nearest(series: Sequence[tuple[float, float]], times: Sequence[float], t: float, tol: float) -> float | None:
    i = bisect_left(times, t)
    best: tuple[float, float] | None = None
    for j in (i - 1, i):
        if 0 <= j < len(series) and abs(series[j][0] - t) <= tol and (best is None or abs(series[j][0] - t) < best[0]):
            best = (abs(series[j][0] - t), series[j][1])
    return None if best is None else best[1]


def idle_fractions(
    util: Mapping[str, Sequence[tuple[float, float]]],
    *,
    interval_s: float = DEFAULT_INTERVAL_S,
    idle_below: float = IDLE_BELOW_PCT,
    busy_from: float = BUSY_FROM_PCT,
) -> dict[str, IdleFraction]:
    """Per GPU: of the samples in which its peers' median utilisation was ≥ ``busy_from``, the %
    in which it was itself below ``idle_below``. Peers' samples are matched to the nearest within
    1.5 intervals (clocks of different nodes are not in step). 0 % when the peers never worked."""
    times = {w: [t for t, _ in s] for w, s in util.items()}
    out: dict[str, IdleFraction] = {}
    for where, series in util.items():
        peers = [p for p in util if p != where]
        busy = idle = 0
        for t, v in series:
            values = [x for p in peers if (x := _nearest(util[p], times[p], t, 1.5 * interval_s)) is not None]
            if not values or statistics.median(values) < busy_from:
                continue
            busy += 1
            idle += v < idle_below
        out[where] = IdleFraction(where, round(100.0 * idle / busy, 1) if busy else 0.0, idle, busy)
    return out


def unjudged_idle(fractions: Mapping[str, IdleFraction]) -> list[str]:
    """GPUs whose idleness could not be judged: no sample came while their peers were busy (the
    fraction would read 0 % on nothing)."""
    return [
        f"{w}: no sample came while its peers were busy: its idleness cannot be judged"
        for w, f in sorted(fractions.items())
        if not f.peer_busy_samples
    ]


def empty_gpu_series_problems(telemetry: Sequence[NodeTelemetry]) -> list[str]:
    """One sentence per node whose GPU series are empty (no GPU, or not one sample of any GPU),
    naming the node and the sampler's error: on nodes with GPU devices, an idle or throttle check
    over such series would pass on nothing."""
    problems = []
    for nt in telemetry:
        if any(points for series in nt.gpus.values() for points in series.values()):
            continue
        why = nt.gpu_error or "; ".join(nt.errors) or "the sampler recorded no error"
        what = "no GPU" if not nt.gpus else f"no sample of its {len(nt.gpus)} GPU(s)"
        problems.append(f"{nt.node}: the telemetry sampler read {what} ({why})")
    return problems


def throttle_problems(telemetry: Sequence[NodeTelemetry]) -> list[str]:
    """One sentence per GPU and bad clock-event reason seen, with how long it lasted."""
    problems = []
    for nt in telemetry:
        for gpu, series in sorted(nt.gpus.items()):
            samples = series.get("throttle", [])
            for bit, words in BAD_THROTTLE.items():
                hits = sum(1 for _, mask in samples if int(mask) & bit)
                if hits:
                    problems.append(
                        f"{nt.node}:{gpu}: {words} in {hits} of {len(samples)} samples (~{hits * nt.interval_s:g} s)"
                    )
    return problems


def _thin(points: Sequence[tuple[float, float]], limit: int = MAX_POINTS) -> list[list[float]]:
    step = max(1, -(-len(points) // limit))
    return [[round(t, 2), v] for t, v in points[::step]]


def series_records(telemetry: Sequence[NodeTelemetry], prefix: str = "telemetry") -> list[dict[str, Any]]:
    """``record("series", ...)`` payloads: every GPU metric per ``node:gpuN`` and the node's CPU
    and memory use, on one time axis (seconds after the earliest node's first sample), named
    ``<prefix>.gpu_<metric>`` and ``<prefix>.<metric>`` (one prefix per watched workload)."""
    if not telemetry:
        return []
    origin = min(nt.t0 for nt in telemetry)
    out: list[dict[str, Any]] = []
    for nt in sorted(telemetry, key=lambda n: n.node):
        shift = nt.t0 - origin
        for gpu, series in sorted(nt.gpus.items()):
            for metric in GPU_METRICS:
                points = [(t + shift, v) for t, v in series.get(metric, [])]
                out.append(
                    {
                        "name": f"{prefix}.gpu_{metric}",
                        "where": f"{nt.node}:{gpu}",
                        "x_label": "s",
                        "y_label": UNITS[metric],
                        "points": _thin(points),
                    }
                )
        for metric, series_ in sorted(nt.node_series.items()):
            points = [(t + shift, v) for t, v in series_]
            out.append(
                {
                    "name": f"{prefix}.{metric}",
                    "where": nt.node,
                    "x_label": "s",
                    "y_label": UNITS[metric],
                    "points": _thin(points),
                }
            )
    return out

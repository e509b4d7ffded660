"""Telemetry, analysed on the login node: what the sampler of ``workloads.telemetry`` recorded
on each node (``NodeTelemetry``) turned into findings and report series. Pure, and tested on
recorded series: a GPU idling while its peers work, clock throttling for reasons an operator
must act on (each of its GPU), and a sampler that did not run or GPU series that came back empty
(each of its node).
"""

from __future__ import annotations

import statistics
from bisect import bisect_left
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pytest_gpucluster.checks.places import gpu_index
from pytest_gpucluster.verdict import Finding, Measurement
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


Gpu = tuple[str, int]  # (node, GPU index)


@dataclass(frozen=True)
class IdleFraction:
    """How often one GPU idled while the median of its peers was busy."""

    gpu: Gpu
    percent: float
    idle_samples: int
    peer_busy_samples: int

    @property
    def where(self) -> str:
        """``node:gpuN``."""
        return f"{self.gpu[0]}:gpu{self.gpu[1]}"

    @property
    def detail(self) -> str:
        """Words for the measurement's detail field."""
        return f"idle in {self.idle_samples} of {self.peer_busy_samples} samples while its peers were busy"

    def measurement(self, what: str = "", job_id: str | None = None) -> Measurement:
        """The fraction as the measurement of its GPU; ``what``: the load, before the detail."""
        detail = f"{what}; {self.detail}" if what else self.detail
        node, gpu = self.gpu
        return Measurement.at(
            "telemetry.gpu_idle_fraction", self.percent, "%", node, gpu=gpu, detail=detail, job_id=job_id
        )


def _gpus(nt: NodeTelemetry) -> list[tuple[int, str]]:
    """The node's sampled GPUs as (index, the sampler's label), by index."""
    return sorted((i, label) for label in nt.gpus if (i := gpu_index(label)) is not None)


def absolute_util(telemetry: Sequence[NodeTelemetry]) -> dict[Gpu, list[tuple[float, float]]]:
    """Every GPU's utilisation series on one clock (Unix time), keyed (node, GPU index)."""
    out: dict[Gpu, list[tuple[float, float]]] = {}
    for nt in telemetry:
        for i, label in _gpus(nt):
            out[(nt.node, i)] = [(nt.t0 + t, v) for t, v in nt.gpus[label].get("util", [])]
    return out


def _nearest(series: Sequence[tuple[float, float]], times: Sequence[float], t: float, tol: float) -> float | None:
    i = bisect_left(times, t)
    best: tuple[float, float] | None = None
    for j in (i - 1, i):
        if 0 <= j < len(series) and abs(series[j][0] - t) <= tol and (best is None or abs(series[j][0] - t) < best[0]):
            best = (abs(series[j][0] - t), series[j][1])
    return None if best is None else best[1]


def idle_fractions(
    util: Mapping[Gpu, Sequence[tuple[float, float]]],
    *,
    interval_s: float = DEFAULT_INTERVAL_S,
    idle_below: float = IDLE_BELOW_PCT,
    busy_from: float = BUSY_FROM_PCT,
) -> dict[Gpu, IdleFraction]:
    """Per GPU: of the samples in which its peers' median utilisation was ≥ ``busy_from``, the %
    in which it was itself below ``idle_below``. Peers' samples are matched to the nearest within
    1.5 intervals (clocks of different nodes are not in step). 0 % when the peers never worked."""
    times = {g: [t for t, _ in s] for g, s in util.items()}
    out: dict[Gpu, IdleFraction] = {}
    for gpu, series in util.items():
        peers = [p for p in util if p != gpu]
        busy = idle = 0
        for t, v in series:
            values = [x for p in peers if (x := _nearest(util[p], times[p], t, 1.5 * interval_s)) is not None]
            if not values or statistics.median(values) < busy_from:
                continue
            busy += 1
            idle += v < idle_below
        out[gpu] = IdleFraction(gpu, round(100.0 * idle / busy, 1) if busy else 0.0, idle, busy)
    return out


def unjudged_idle(fractions: Mapping[Gpu, IdleFraction]) -> list[Finding]:
    """GPUs whose idleness could not be measured, each a failure of its GPU (never a pass): no
    sample came while their peers were busy (the fraction would read 0 % on nothing)."""
    return [
        Finding.on_node(
            f.gpu[0],
            f"{f.where}: no sample came while its peers were busy: its idleness cannot be judged",
            gpu=f.gpu[1],
        )
        for _, f in sorted(fractions.items())
        if not f.peer_busy_samples
    ]


def sampling_findings(nt: NodeTelemetry) -> list[Finding]:
    """The node's own series (CPU, memory) with fewer than 2 samples: the sampler did not run."""
    return [
        Finding.on_node(
            nt.node, f"{nt.node}: {len(s)} {name} samples in {nt.wall_s:.1f} s at {nt.interval_s} s intervals"
        )
        for name, s in nt.node_series.items()
        if len(s) < 2
    ]


def empty_gpu_series_findings(telemetry: Sequence[NodeTelemetry]) -> list[Finding]:
    """One finding per node whose GPU series are empty (no GPU, or not one sample of any GPU),
    naming the node and the sampler's error: on nodes with GPU devices, an idle or throttle check
    over such series would pass on nothing."""
    found = []
    for nt in telemetry:
        if any(points for series in nt.gpus.values() for points in series.values()):
            continue
        why = nt.gpu_error or "; ".join(nt.errors) or "the sampler recorded no error"
        what = "no GPU" if not nt.gpus else f"no sample of its {len(nt.gpus)} GPU(s)"
        found.append(Finding.on_node(nt.node, f"{nt.node}: the telemetry sampler read {what} ({why})"))
    return found


def throttle_findings(telemetry: Sequence[NodeTelemetry]) -> list[Finding]:
    """One finding of its GPU per GPU and bad clock-event reason seen, with how long it lasted."""
    found = []
    for nt in telemetry:
        for i, label in _gpus(nt):
            samples = nt.gpus[label].get("throttle", [])
            for bit, words in BAD_THROTTLE.items():
                hits = sum(1 for _, mask in samples if int(mask) & bit)
                if hits:
                    text = (
                        f"{nt.node}:{label}: {words} in {hits} of {len(samples)} samples (~{hits * nt.interval_s:g} s)"
                    )
                    found.append(Finding.on_node(nt.node, text, gpu=i))
    return found


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

"""A soak's streams on the login node as they arrive: one ``GpuTrack`` per GPU (or CPU rank
standing in) with its start record, its cycle records and its end, gathered per node by
``SoakTrack``; the names and units of the metrics a cycle measures, and how a finding says the cycle
it began in (``when``). Pure.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pytest_gpucluster.checks.xid import gpu_order

UNITS = {"tflops": "TFLOP/s", "copy_tbps": "TB/s", "busbw_gbps": "GB/s"}
TITLES = {"tflops": "GEMM", "copy_tbps": "device copy", "busbw_gbps": "all_reduce busbw"}


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
        return [number(c.get(metric)) for c in self.cycles]


def number(value: Any) -> float | None:
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

"""Are the nodes alike? Pure comparison, on the login node, of the node inventories the nodes
returned (``workloads.inventory.summarise`` output).

"Workers are identical" is checked fact by fact: the value most nodes share is the
reference and every other node is named with its value, e.g.
``worker3: driver 550.54 vs 560.35 on 15 others``. Where no value has a majority (one node
against one), every node is named and the sentence says so. A node is the culprit of its
difference only where the reference is held by a strict majority of the nodes; otherwise the
difference names every compared node together, with no culprit. The profile's own expectations
(GPU model and count, minimum driver/CUDA, kernel, RAM) are checked per node as well: each is
its node's.
"""

from __future__ import annotations

import re
import statistics
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pytest_gpucluster.verdict import Finding

NA = "n/a"

# Facts that must be identical on every node (summary key → how a sentence names it). RAM is not
# here: it legitimately differs by a few MiB and is judged with a tolerance (memory_deviation).
MUST_MATCH: tuple[tuple[str, str], ...] = (
    ("gpu_model", "GPU model"),
    ("gpu_count", "GPU count"),
    ("gpu_memory_mib", "GPU memory (MiB)"),
    ("driver", "driver"),
    ("cuda", "CUDA"),
    ("nccl", "NCCL"),
    ("mig_mode", "MIG mode"),
    ("gpu_interconnect", "GPU interconnect"),
    ("os", "OS"),
    ("kernel", "kernel"),
    ("cpu_model", "CPU model"),
    ("cpu_topology", "CPU topology (sockets x cores x threads)"),
    ("logical_cpus", "logical CPUs"),
    ("numa_nodes", "NUMA nodes"),
    ("ib_devices", "IB devices"),
    ("ib_firmware", "IB firmware"),
)


@dataclass(frozen=True)
class Mismatch:
    """One node whose value of one fact differs from the others'."""

    node: str
    fact: str
    value: Any
    reference: Any  # the majority's value (None when there is no majority)
    sentence: str
    compared: tuple[str, ...] = ()  # every node compared
    strict: bool = False  # the reference is held by more than half of the compared nodes

    def finding(self) -> Finding:
        """Of the node where a strict majority holds the reference; else of every compared node
        together, with no culprit."""
        if self.strict:
            return Finding.on_node(self.node, self.sentence)
        return Finding.across([self.node, *self.compared], self.sentence)


def _others(n: int) -> str:
    return f"{n} other" if n == 1 else f"{n} others"


def mismatches(
    summaries: Mapping[str, Mapping[str, Any]], facts: Sequence[tuple[str, str]] = MUST_MATCH
) -> list[Mismatch]:
    """Every (node, fact) that differs from the majority, in node then fact order."""
    out: list[Mismatch] = []
    nodes = sorted(summaries)
    for key, label in facts:
        values = {node: summaries[node].get(key, NA) for node in nodes}
        groups = Counter(str(v) for v in values.values())
        if len(groups) <= 1:
            continue
        ranked = groups.most_common()
        top_value, top_count = ranked[0]
        tie = len(ranked) > 1 and ranked[1][1] == top_count
        strict = top_count * 2 > len(nodes)
        for node in nodes:
            mine = str(values[node])
            if not tie and mine == top_value:
                continue
            if tie:
                rest = ", ".join(f"{v} on {_others(c)}" for v, c in ranked if v != mine)
                sentence = f"{node}: {label} {mine} vs {rest} (no majority)"
                out.append(Mismatch(node, key, values[node], None, sentence, tuple(nodes)))
            else:
                sentence = f"{node}: {label} {mine} vs {top_value} on {_others(top_count)}"
                out.append(Mismatch(node, key, values[node], top_value, sentence, tuple(nodes), strict))
    return sorted(out, key=lambda m: (m.node, [k for k, _ in facts].index(m.fact)))


def findings_for(found: Sequence[Mismatch], node: str) -> list[Finding]:
    """The findings about ``node``, for its per-node test (``Mismatch.finding``)."""
    return [m.finding() for m in found if m.node == node]


# --------------------------------------------------------------------------- the profile's expectations


def version_tuple(text: str) -> tuple[int, ...] | None:
    """``"550.54.15"`` → (550, 54, 15); None when the text holds no version."""
    parts = re.findall(r"\d+", text)
    return tuple(int(p) for p in parts) if parts else None


def profile_findings(
    node: str,
    summary: Mapping[str, Any],
    *,
    gpu_model: str | None = None,
    gpus_per_node: int | None = None,
    gpus_are_real: bool = True,
    min_driver: str | None = None,
    min_cuda: str | None = None,
    expect_kernel: str | None = None,
) -> list[Finding]:
    """Where ``node`` differs from what the profile says it is, each a failure of the node. GPU
    facts are only checked when the profile's GPUs are real devices (GRES-only test nodes have
    none for NVML to see)."""
    problems: list[str] = []
    if gpus_are_real:
        model = str(summary.get("gpu_model", NA))
        if gpu_model and gpu_model.lower() not in model.lower():
            problems.append(f"{node}: GPU model {model}, profile expects {gpu_model}")
        count = summary.get("gpu_count")
        if gpus_per_node is not None and count != gpus_per_node:
            problems.append(f"{node}: {count} GPUs visible to NVML, profile expects {gpus_per_node}")
        for key, label, minimum in (("driver", "driver", min_driver), ("cuda", "CUDA", min_cuda)):
            if not minimum:
                continue
            have = str(summary.get(key, NA))
            have_t, want_t = version_tuple(have), version_tuple(minimum)
            if have_t is None or (want_t is not None and have_t < want_t):
                problems.append(f"{node}: {label} {have} is older than the profile's min_{key} {minimum}")
    kernel = str(summary.get("kernel", NA))
    if expect_kernel and kernel != expect_kernel:
        problems.append(f"{node}: kernel {kernel}, profile expects {expect_kernel}")
    return [Finding.on_node(node, p) for p in problems]


# --------------------------------------------------------------------------- RAM and sizing


@dataclass(frozen=True)
class MemoryDeviation:
    """How far one node's RAM is from the reference (the profile's figure, else the median)."""

    node: str
    memory_gib: float
    reference_gib: float
    reference: str  # "expected" or "median"
    percent: float

    @property
    def detail(self) -> str:
        """Words for the measurement's detail field."""
        return f"RAM {self.memory_gib:g} GiB vs {self.reference} {self.reference_gib:g} GiB"


def memory_deviation(
    summaries: Mapping[str, Mapping[str, Any]], expected_gib: float | None = None
) -> dict[str, MemoryDeviation]:
    """Per node: |RAM − reference| / reference, in %. Nodes whose RAM could not be read are
    left out (and reported by the caller)."""
    mem = {n: float(s["memory_gib"]) for n, s in summaries.items() if isinstance(s.get("memory_gib"), int | float)}
    if not mem:
        return {}
    ref, label = (expected_gib, "expected") if expected_gib else (statistics.median(mem.values()), "median")
    return {n: MemoryDeviation(n, m, round(ref, 2), label, abs(m - ref) / ref * 100.0) for n, m in mem.items()}


@dataclass(frozen=True)
class Sizing:
    """The reference acceptance procedure's CPU/RAM sizing: logical CPUs and GiB of host RAM per GPU
    on one node."""

    cpus_per_gpu: float
    memory_gib_per_gpu: float


def per_gpu_sizing(summary: Mapping[str, Any]) -> Sizing | None:
    """CPUs and RAM per GPU, or None on a node without GPUs (nothing to size against)."""
    gpus = summary.get("gpu_count")
    if not isinstance(gpus, int) or gpus == 0:
        return None
    cpus, mem = summary.get("logical_cpus"), summary.get("memory_gib")
    return Sizing(
        cpus_per_gpu=cpus / gpus if isinstance(cpus, int | float) else float("nan"),
        memory_gib_per_gpu=mem / gpus if isinstance(mem, int | float) else float("nan"),
    )

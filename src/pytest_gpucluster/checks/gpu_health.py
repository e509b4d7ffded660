"""Per-node GPU health, judged on the login node: the NVML readings ``workloads.gpu_health``
brought back (``NodeGpus``) turned into problems, warnings and readings to compare with the
thresholds. A reading NVML does not support is never judged as a pass: it is named as unmeasured.
"""

from __future__ import annotations

from collections.abc import Sequence

from pytest_gpucluster.workloads.gpu_health import NodeGpus
from pytest_gpucluster.workloads.nvml_util import decode_throttle_reasons

# Reasons that do not slow a healthy GPU at rest: idle itself, clocks an admin chose, boost sync.
BENIGN_REASONS = frozenset({"gpu_idle", "applications_clocks_setting", "sync_boost", "display_clock_setting"})


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in text.split(".") if p.isdigit())


def inventory_problems(n: NodeGpus, *, count: int, model: str | None) -> list[str]:
    """The node has ``count`` GPUs of ``model`` (a fragment of the NVML name) and NVML answers."""
    if n.error:
        return [f"{n.node}: {n.error}"]
    problems = []
    if len(n.gpus) != count:
        problems.append(f"{n.node}: {len(n.gpus)} GPU(s) visible to NVML, expected {count}")
    if model:
        problems += [
            f"{n.node}:gpu{g.index}: is {g.name!r}, expected {model!r}"
            for g in n.gpus
            if model.lower() not in g.name.lower()
        ]
    problems += [f"{n.node}:gpu{g.index}: {e}" for g in n.gpus for e in g.errors]
    return problems


def version_problems(nodes: Sequence[NodeGpus], *, min_driver: str | None, min_cuda: str | None) -> list[str]:
    """Driver and CUDA versions are the same on every node and not below the profile's minimum."""
    live = [n for n in nodes if not n.error]
    problems = [f"{n.node}: {n.error}" for n in nodes if n.error]
    for label, attr, floor in (("driver", "driver", min_driver), ("CUDA", "cuda", min_cuda)):
        seen: dict[str, list[str]] = {}
        for n in live:
            seen.setdefault(getattr(n, attr), []).append(n.node)
        if len(seen) > 1:
            spread = "; ".join(f"{v} on {', '.join(ns)}" for v, ns in seen.items())
            problems.append(f"{label} versions differ: {spread}")
        if floor:
            problems += [
                f"{', '.join(ns)}: {label} {v} is older than the profile's minimum {floor}"
                for v, ns in seen.items()
                if _version(v) < _version(floor)
            ]
    return problems


def link_problems(n: NodeGpus) -> tuple[list[str], list[str]]:
    """(problems, warnings) for NVLink, PCIe and clock-event reasons of every GPU on ``n``."""
    problems: list[str] = []
    warns: list[str] = []
    if n.error or not n.gpus:
        return [f"{n.node}: {n.error or 'no GPU visible to NVML'}; links and clocks not checked"], []
    linked = [g.nvlinks for g in n.gpus if g.nvlinks is not None]
    most = max((len(links) for links in linked), default=0)
    for g in n.gpus:
        where = f"{n.node}:gpu{g.index}"
        if g.nvlinks is None and most:
            problems.append(f"{where}: reports no NVLink while other GPUs of the node have {most} links")
        elif g.nvlinks is not None:
            down = [i for i, up in enumerate(g.nvlinks) if not up]
            if down:
                problems.append(f"{where}: NVLink(s) {down} down ({len(g.nvlinks) - len(down)} of {len(g.nvlinks)} up)")
        if g.pcie_width is not None and g.pcie_width[0] < g.pcie_width[1]:
            problems.append(f"{where}: PCIe link x{g.pcie_width[0]}, the link supports x{g.pcie_width[1]} (lanes lost)")
        if g.pcie_gen is not None and g.pcie_gen[1] < g.pcie_gen[2]:
            # Current gen drops at idle by design; only the link's own maximum says something.
            warns.append(f"{where}: PCIe link can reach Gen{g.pcie_gen[1]} only, the GPU supports Gen{g.pcie_gen[2]}")
        if g.clock_reasons is not None:
            bad = [r for r in decode_throttle_reasons(g.clock_reasons) if r not in BENIGN_REASONS]
            if bad:
                problems.append(f"{where}: clocks held down by {', '.join(bad)} (reasons 0x{g.clock_reasons:x})")
        for what in ("clock event reasons", "PCIe width"):
            if what in g.unsupported:
                warns.append(f"{where}: {what} not supported by NVML; not checked")
    return problems, warns


# metric → (GpuHealth attribute, other readings that make this one unnecessary when supported)
HEALTH_METRICS = {
    "gpu.temperature": ("temperature_c", ()),
    "gpu.memory_temperature": ("memory_temperature_c", ()),
    "gpu.memory_used_at_rest": ("memory_used_mib", ()),
    "gpu.ecc_volatile_uncorrectable": ("ecc_volatile_uncorrectable", ()),
    "gpu.retired_pages_pending": ("retired_pages_pending", ("remapped_rows_pending",)),
    "gpu.remapped_rows_pending": ("remapped_rows_pending", ("retired_pages_pending",)),
    "gpu.remapped_rows_failed": ("remapped_rows_failed", ("retired_pages_pending",)),
}


def health_readings(n: NodeGpus) -> tuple[list[tuple[str, str, float]], list[str]]:
    """((metric, ``node:gpuN``, value) to judge, warnings for readings NVML does not support).
    Retired pages (before Ampere) and row remapping (Ampere on) stand in for each other."""
    readings: list[tuple[str, str, float]] = []
    unsupported: list[str] = []
    if n.error or not n.gpus:  # nothing was read: every metric fails as unmeasured, none passes
        where = f"{n.node} ({n.error or 'no GPU visible to NVML'})"
        return [(metric, where, float("nan")) for metric in HEALTH_METRICS], []
    for g in n.gpus:
        where = f"{n.node}:gpu{g.index}"
        for metric, (attr, alternatives) in HEALTH_METRICS.items():
            value = getattr(g, attr)
            if value is not None:
                readings.append((metric, where, float(value)))
            elif not any(getattr(g, alt) is not None for alt in alternatives):
                unsupported.append(f"{where}: {metric} not supported by NVML; not measured")
    return readings, unsupported

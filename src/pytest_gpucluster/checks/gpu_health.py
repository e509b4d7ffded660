"""Per-node GPU health, judged on the login node: the NVML readings ``workloads.gpu_health``
brought back (``NodeGpus``) turned into findings (each of its GPU, link or node) and readings to
compare with the thresholds. A reading NVML does not support is never judged as a pass: it is
named as unmeasured.
"""

from __future__ import annotations

from collections.abc import Sequence

from pytest_gpucluster.checks.places import of_nodes, off_majority
from pytest_gpucluster.config import METRICS
from pytest_gpucluster.verdict import Finding, Measurement
from pytest_gpucluster.workloads.gpu_health import NodeGpus
from pytest_gpucluster.workloads.nvml_util import decode_throttle_reasons

# Reasons that do not slow a healthy GPU at rest: idle itself, clocks an admin chose, boost sync.
BENIGN_REASONS = frozenset({"gpu_idle", "applications_clocks_setting", "sync_boost", "display_clock_setting"})


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in text.split(".") if p.isdigit())


def inventory_findings(n: NodeGpus, *, count: int, model: str | None) -> list[Finding]:
    """The node has ``count`` GPUs of ``model`` (a fragment of the NVML name) and NVML answers:
    a wrong count is the node's, a wrong model or an NVML error its GPU's."""
    if n.error:
        return [Finding.on_node(n.node, f"{n.node}: {n.error}")]
    found = []
    if len(n.gpus) != count:
        found.append(Finding.on_node(n.node, f"{n.node}: {len(n.gpus)} GPU(s) visible to NVML, expected {count}"))
    if model:
        found += [
            Finding.on_node(n.node, f"{n.node}:gpu{g.index}: is {g.name!r}, expected {model!r}", gpu=g.index)
            for g in n.gpus
            if model.lower() not in g.name.lower()
        ]
    found += [Finding.on_node(n.node, f"{n.node}:gpu{g.index}: {e}", gpu=g.index) for g in n.gpus for e in g.errors]
    return found


def version_findings(nodes: Sequence[NodeGpus], *, min_driver: str | None, min_cuda: str | None) -> list[Finding]:
    """Driver and CUDA versions are the same on every node and not below the profile's minimum.
    Where versions differ, the nodes that differ from a strict majority are the culprits (none
    without one); a version below the minimum is each of its nodes' own."""
    live = [n for n in nodes if not n.error]
    found = [Finding.on_node(n.node, f"{n.node}: {n.error}") for n in nodes if n.error]
    for label, attr, floor in (("driver", "driver", min_driver), ("CUDA", "cuda", min_cuda)):
        seen: dict[str, list[str]] = {}
        for n in live:
            seen.setdefault(getattr(n, attr), []).append(n.node)
        if len(seen) > 1:
            spread = "; ".join(f"{v} on {', '.join(ns)}" for v, ns in seen.items())
            odd = off_majority({n.node: getattr(n, attr) for n in live})
            found.append(Finding.across([n.node for n in live], f"{label} versions differ: {spread}", culprits=odd))
        if floor:  # below the minimum: each node of it on its own account
            found += [
                of_nodes(ns, f"{', '.join(ns)}: {label} {v} is older than the profile's minimum {floor}", culprits=ns)
                for v, ns in seen.items()
                if _version(v) < _version(floor)
            ]
    return found


def link_findings(n: NodeGpus) -> list[Finding]:
    """NVLink, PCIe and clock-event reasons of every GPU on ``n``: one link down is that link's
    (``link 5`` of its GPU), the rest its GPU's; a PCIe link below the GPU's generation and a
    reading NVML does not support are warnings."""
    if n.error or not n.gpus:
        return [
            Finding.on_node(n.node, f"{n.node}: {n.error or 'no GPU visible to NVML'}; links and clocks not checked")
        ]
    found: list[Finding] = []
    linked = [g.nvlinks for g in n.gpus if g.nvlinks is not None]
    most = max((len(links) for links in linked), default=0)
    for g in n.gpus:
        where = f"{n.node}:gpu{g.index}"
        if g.nvlinks is None and most:
            found.append(
                Finding.on_node(
                    n.node, f"{where}: reports no NVLink while other GPUs of the node have {most} links", gpu=g.index
                )
            )
        elif g.nvlinks is not None:
            down = [i for i, up in enumerate(g.nvlinks) if not up]
            if down:
                text = f"{where}: NVLink(s) {down} down ({len(g.nvlinks) - len(down)} of {len(g.nvlinks)} up)"
                port = f"link {down[0]}" if len(down) == 1 else ""  # several links: their GPU's
                found.append(Finding.on_node(n.node, text, gpu=g.index, port=port))
        if g.pcie_width is not None and g.pcie_width[0] < g.pcie_width[1]:
            text = f"{where}: PCIe link x{g.pcie_width[0]}, the link supports x{g.pcie_width[1]} (lanes lost)"
            found.append(Finding.on_node(n.node, text, gpu=g.index))
        if g.pcie_gen is not None and g.pcie_gen[1] < g.pcie_gen[2]:
            # Current gen drops at idle by design; only the link's own maximum says something.
            text = f"{where}: PCIe link can reach Gen{g.pcie_gen[1]} only, the GPU supports Gen{g.pcie_gen[2]}"
            found.append(Finding.on_node(n.node, text, gpu=g.index, severity="warn"))
        if g.clock_reasons is not None:
            bad = [r for r in decode_throttle_reasons(g.clock_reasons) if r not in BENIGN_REASONS]
            if bad:
                text = f"{where}: clocks held down by {', '.join(bad)} (reasons 0x{g.clock_reasons:x})"
                found.append(Finding.on_node(n.node, text, gpu=g.index))
        for what in ("clock event reasons", "PCIe width"):
            if what in g.unsupported:
                text = f"{where}: {what} not supported by NVML; not checked"
                found.append(Finding.on_node(n.node, text, gpu=g.index, severity="warn"))
    return found


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


def health_readings(n: NodeGpus) -> tuple[list[Measurement], list[Finding]]:
    """(each GPU's readings to judge, a warning of its GPU for each reading NVML does not
    support). Retired pages (before Ampere) and row remapping (Ampere on) stand in for each
    other. With nothing read, every metric is NaN on the node: it fails as unmeasured."""
    if n.error or not n.gpus:
        why = n.error or "no GPU visible to NVML"
        return [Measurement.at(m, float("nan"), METRICS[m].unit, n.node, detail=why) for m in HEALTH_METRICS], []
    readings: list[Measurement] = []
    unsupported: list[Finding] = []
    for g in n.gpus:
        for metric, (attr, alternatives) in HEALTH_METRICS.items():
            value = getattr(g, attr)
            if value is not None:
                readings.append(Measurement.at(metric, float(value), METRICS[metric].unit, n.node, gpu=g.index))
            elif not any(getattr(g, alt) is not None for alt in alternatives):
                text = f"{n.node}:gpu{g.index}: {metric} not supported by NVML; not measured"
                unsupported.append(Finding.on_node(n.node, text, gpu=g.index, severity="warn"))
    return readings, unsupported

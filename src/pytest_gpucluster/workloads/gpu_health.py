"""Per-node GPU health from NVML (seed 000, phase 4 and the health checks of the peers):
inventory, driver/CUDA versions, ECC and row remapping, NVLink, PCIe link, clock-event reasons,
temperatures and memory in use at rest.

``read_node`` runs once per node in a job holding all its GPUs and touches no CUDA context, so
"memory used at rest" is what others left behind. A reading NVML does not support is kept as
``None`` and its name listed in ``unsupported``: it is never judged as a pass, and any other
NVML error is listed in ``errors`` and fails the node.
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from pytest_gpucluster.workloads.context import TaskContext
from pytest_gpucluster.workloads.nvml_util import decode_throttle_reasons

T = TypeVar("T")

# Reasons that do not slow a healthy GPU at rest: idle itself, clocks an admin chose, boost sync.
BENIGN_REASONS = frozenset({"gpu_idle", "applications_clocks_setting", "sync_boost", "display_clock_setting"})


@dataclass(frozen=True)
class GpuHealth:
    """One GPU's readings; ``None`` where NVML does not support the query."""

    index: int
    name: str
    uuid: str
    pci_bus_id: str
    temperature_c: float | None = None
    memory_temperature_c: float | None = None
    memory_used_mib: float | None = None
    ecc_volatile_uncorrectable: int | None = None
    retired_pages_pending: int | None = None
    remapped_rows_pending: int | None = None
    remapped_rows_failed: int | None = None
    nvlinks: tuple[bool, ...] | None = None  # per link: up; None: no NVLink on this GPU
    pcie_gen: tuple[int, int, int] | None = None  # current, max of this link, max of the GPU
    pcie_width: tuple[int, int] | None = None  # current, max
    clock_reasons: int | None = None
    unsupported: tuple[str, ...] = ()
    errors: tuple[str, ...] = ()


@dataclass(frozen=True)
class NodeGpus:
    """A node's GPUs and its driver stack."""

    node: str
    driver: str
    cuda: str  # CUDA version the driver supports, e.g. "12.4"
    gpus: tuple[GpuHealth, ...]
    error: str = ""  # NVML unusable on the node


def _str(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class _Reader:
    """Calls NVML, sorting failures into not-supported and real errors."""

    def __init__(self, nvml: Any) -> None:
        self.nvml = nvml
        self.unsupported: list[str] = []
        self.errors: list[str] = []

    def get(self, what: str, fn: Callable[[], T]) -> T | None:
        try:
            return fn()
        except self.nvml.NVMLError_NotSupported:
            self.unsupported.append(what)
        except self.nvml.NVMLError as exc:
            self.errors.append(f"{what}: {exc}")
        return None


def _nvlinks(nvml: Any, h: Any) -> tuple[bool, ...] | None:
    states = []
    for link in range(int(getattr(nvml, "NVML_NVLINK_MAX_LINKS", 18))):
        try:
            states.append(nvml.nvmlDeviceGetNvLinkState(h, link) == nvml.NVML_FEATURE_ENABLED)
        except (nvml.NVMLError_NotSupported, nvml.NVMLError_InvalidArgument):
            break  # past the GPU's last link (or no NVLink at all)
    return tuple(states) or None


def _gpu(nvml: Any, i: int) -> GpuHealth:
    h = nvml.nvmlDeviceGetHandleByIndex(i)
    r = _Reader(nvml)
    memory = r.get("memory info", lambda: nvml.nvmlDeviceGetMemoryInfo(h))
    ecc = r.get("volatile ECC", lambda: nvml.nvmlDeviceGetTotalEccErrors(
        h, nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nvml.NVML_VOLATILE_ECC))  # fmt: skip
    pending = r.get("retired pages", lambda: nvml.nvmlDeviceGetRetiredPagesPendingStatus(h))
    rows = r.get("remapped rows", lambda: nvml.nvmlDeviceGetRemappedRows(h))  # (corr, unc, pending, failed)
    mem_temp = r.get("memory temperature", lambda: nvml.nvmlDeviceGetFieldValues(h, [nvml.NVML_FI_DEV_MEMORY_TEMP])[0])
    if mem_temp is not None and getattr(mem_temp, "nvmlReturn", 0) != 0:
        r.unsupported.append("memory temperature")
        mem_temp = None
    # Renamed from "throttle" to "clocks event" reasons in newer NVML; the bits are the same.
    reasons_fn = getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None)
    reasons_fn = reasons_fn or nvml.nvmlDeviceGetCurrentClocksThrottleReasons
    pcie_gen = r.get("PCIe generation", lambda: (
        int(nvml.nvmlDeviceGetCurrPcieLinkGeneration(h)),
        int(nvml.nvmlDeviceGetMaxPcieLinkGeneration(h)),
        int(nvml.nvmlDeviceGetGpuMaxPcieLinkGeneration(h)),
    ))  # fmt: skip
    pcie_width = r.get("PCIe width", lambda: (int(nvml.nvmlDeviceGetCurrPcieLinkWidth(h)),
                       int(nvml.nvmlDeviceGetMaxPcieLinkWidth(h))))  # fmt: skip
    return GpuHealth(
        index=i,
        name=_str(nvml.nvmlDeviceGetName(h)),
        uuid=_str(nvml.nvmlDeviceGetUUID(h)),
        pci_bus_id=_str(nvml.nvmlDeviceGetPciInfo(h).busId),
        temperature_c=r.get("temperature", lambda: float(nvml.nvmlDeviceGetTemperature(h, nvml.NVML_TEMPERATURE_GPU))),
        memory_temperature_c=float(mem_temp.value.uiVal) if mem_temp is not None else None,
        memory_used_mib=memory.used / 2**20 if memory is not None else None,
        ecc_volatile_uncorrectable=int(ecc) if ecc is not None else None,
        retired_pages_pending=int(bool(pending)) if pending is not None else None,
        remapped_rows_pending=int(bool(rows[2])) if rows is not None else None,
        remapped_rows_failed=int(bool(rows[3])) if rows is not None else None,
        nvlinks=_nvlinks(nvml, h),
        pcie_gen=pcie_gen,
        pcie_width=pcie_width,
        clock_reasons=r.get("clock event reasons", lambda: int(reasons_fn(h))),
        unsupported=tuple(r.unsupported),
        errors=tuple(r.errors),
    )


def read_node(ctx: TaskContext) -> NodeGpus:
    """Every GPU of this node through NVML (no CUDA context is created)."""
    node = ctx.hostname or socket.gethostname()
    try:
        import pynvml as nvml

        nvml.nvmlInit()
    except Exception as exc:  # no library, no driver: the node has no usable GPU stack
        return NodeGpus(node, "", "", (), error=f"NVML unusable: {exc}")
    try:
        cuda = int(nvml.nvmlSystemGetCudaDriverVersion())
        gpus = tuple(_gpu(nvml, i) for i in range(nvml.nvmlDeviceGetCount()))
        return NodeGpus(node, _str(nvml.nvmlSystemGetDriverVersion()), f"{cuda // 1000}.{cuda % 1000 // 10}", gpus)
    except nvml.NVMLError as exc:
        return NodeGpus(node, "", "", (), error=f"NVML: {exc}")
    finally:
        nvml.nvmlShutdown()


# --------------------------------------------------------------------------- judging (login node)


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
        problems += [f"{n.node}:gpu{g.index}: is {g.name!r}, expected {model!r}"
                     for g in n.gpus if model.lower() not in g.name.lower()]  # fmt: skip
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
            problems += [f"{', '.join(ns)}: {label} {v} is older than the profile's minimum {floor}"
                         for v, ns in seen.items() if _version(v) < _version(floor)]  # fmt: skip
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

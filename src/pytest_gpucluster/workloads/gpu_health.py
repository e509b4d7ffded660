"""Per-node GPU health read from NVML on the node: inventory, driver/CUDA versions, ECC and row
remapping, NVLink, PCIe link, clock-event reasons, temperatures and memory in use at rest
(``checks.gpu_health`` judges the readings on the login node).

``read_node`` runs once per node in a job holding all its GPUs and touches no CUDA context, so
"memory used at rest" is what others left behind. A reading NVML does not support is kept as
``None`` and its name listed in ``unsupported``: it is never judged as a pass, and any other
NVML error is listed in ``errors`` and fails the node.
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from pytest_gpucluster.workloads.context import TaskContext
from pytest_gpucluster.workloads.nvml_util import node_gpu_indices

T = TypeVar("T")


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
    ecc = r.get(
        "volatile ECC",
        lambda: nvml.nvmlDeviceGetTotalEccErrors(h, nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nvml.NVML_VOLATILE_ECC),
    )
    pending = r.get("retired pages", lambda: nvml.nvmlDeviceGetRetiredPagesPendingStatus(h))
    rows = r.get("remapped rows", lambda: nvml.nvmlDeviceGetRemappedRows(h))  # (corr, unc, pending, failed)
    mem_temp = r.get("memory temperature", lambda: nvml.nvmlDeviceGetFieldValues(h, [nvml.NVML_FI_DEV_MEMORY_TEMP])[0])
    if mem_temp is not None and getattr(mem_temp, "nvmlReturn", 0) != 0:
        r.unsupported.append("memory temperature")
        mem_temp = None
    # Renamed from "throttle" to "clocks event" reasons in newer NVML; the bits are the same.
    reasons_fn = getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None)
    reasons_fn = reasons_fn or nvml.nvmlDeviceGetCurrentClocksThrottleReasons
    pcie_gen = r.get(
        "PCIe generation",
        lambda: (
            int(nvml.nvmlDeviceGetCurrPcieLinkGeneration(h)),
            int(nvml.nvmlDeviceGetMaxPcieLinkGeneration(h)),
            int(nvml.nvmlDeviceGetGpuMaxPcieLinkGeneration(h)),
        ),
    )
    pcie_width = r.get(
        "PCIe width", lambda: (int(nvml.nvmlDeviceGetCurrPcieLinkWidth(h)), int(nvml.nvmlDeviceGetMaxPcieLinkWidth(h)))
    )
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
    """Every GPU of this node through NVML (no CUDA context is created); where the node is part of
    the machine (``nvml_util.NODE_GPUS_ENV``), its GPUs only."""
    node = ctx.hostname or socket.gethostname()
    try:
        import pynvml as nvml

        nvml.nvmlInit()
    except Exception as exc:  # no library, no driver: the node has no usable GPU stack
        return NodeGpus(node, "", "", (), error=f"NVML unusable: {exc}")
    try:
        cuda = int(nvml.nvmlSystemGetCudaDriverVersion())
        gpus = tuple(_gpu(nvml, i) for i in node_gpu_indices(int(nvml.nvmlDeviceGetCount())))
        return NodeGpus(node, _str(nvml.nvmlSystemGetDriverVersion()), f"{cuda // 1000}.{cuda % 1000 // 10}", gpus)
    except nvml.NVMLError as exc:
        return NodeGpus(node, "", "", (), error=f"NVML: {exc}")
    finally:
        nvml.nvmlShutdown()

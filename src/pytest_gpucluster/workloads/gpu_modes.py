"""The GPUs' modes a node's configuration sets, read through NVML: persistence mode, ECC mode
(current and pending), on NVSwitch systems the GPU's fabric registration with the fabric
manager, and what caps a GPU's speed by setting: its power limits (the driver's, its default and
the one enforced, which an out-of-band cap lowers too), its applications clocks against their
defaults, and its compute mode; and its PCI address, which ties NVML's index to the GPU's place in
sysfs (``checks.gpu_placement``). ``None`` where NVML does not support the reading on that GPU; no
CUDA context is made."""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from typing import Any

from pytest_gpucluster.workloads.nvml_util import node_gpu_indices

# nvmlGpuFabricState_t (nvml.h)
FABRIC_STATES = {0: "not supported", 1: "not started", 2: "in progress", 3: "completed"}
FABRIC_COMPLETED = 3
FABRIC_NOT_SUPPORTED = 0


@dataclass(frozen=True)
class GpuMode:
    """One GPU's modes; ``None`` where NVML does not support the query on it."""

    index: int
    persistence: bool | None = None
    ecc_current: bool | None = None
    ecc_pending: bool | None = None
    fabric_state: int | None = None  # FABRIC_STATES; None: this NVML has no fabric query
    fabric_status: int | None = None  # the NVML return code of the registration (0: success)
    power_limit_w: float | None = None  # the driver's power management limit (nvidia-smi -pl)
    power_default_w: float | None = None  # the board's default power management limit
    power_enforced_w: float | None = None  # the limit in force: the lowest of the driver's and out-of-band caps
    app_clock_mhz: int | None = None  # applications clock, graphics
    app_clock_default_mhz: int | None = None
    app_memory_clock_mhz: int | None = None  # applications clock, memory
    app_memory_clock_default_mhz: int | None = None
    compute_mode: int | None = None  # nvmlComputeMode_t (config.node_config.COMPUTE_MODES names them)
    pci_bus_id: str = ""  # as sysfs names the GPU ("0000:18:00.0"); "" where NVML did not say


@dataclass(frozen=True)
class GpuModes:
    """A node's GPUs' modes, or why NVML could not be read."""

    gpus: tuple[GpuMode, ...] = ()
    error: str = ""


def _try(nvml: Any, fn: Any) -> Any:
    try:
        return fn()
    except nvml.NVMLError:
        return None


def _fabric(nvml: Any, handle: Any) -> tuple[int | None, int | None]:
    info = nvml.c_nvmlGpuFabricInfo_t()
    try:
        nvml.nvmlDeviceGetGpuFabricInfo(handle, ctypes.byref(info))
    except nvml.NVMLError_NotSupported:
        return FABRIC_NOT_SUPPORTED, None
    except (nvml.NVMLError, AttributeError):
        return None, None
    return int(info.state), int(info.status)


def _watts(milliwatts: Any) -> float | None:
    return None if milliwatts is None else int(milliwatts) / 1000


def _int(value: Any) -> int | None:
    return None if value is None else int(value)


def bus_id(nvml_bus_id: str | bytes) -> str:
    """NVML's PCI bus id (``00000000:18:00.0``, a 32-bit domain) as sysfs names the device
    (``0000:18:00.0``); "" for anything else."""
    text = nvml_bus_id.decode() if isinstance(nvml_bus_id, bytes) else nvml_bus_id
    parts = text.strip().lower().split(":")
    if len(parts) != 3 or not all(parts):
        return ""
    try:
        domain = int(parts[0], 16)
    except ValueError:
        return ""
    return f"{domain:04x}:{parts[1]}:{parts[2]}"


def _gpu(nvml: Any, index: int) -> GpuMode:
    h = nvml.nvmlDeviceGetHandleByIndex(index)
    persistence = _try(nvml, lambda: nvml.nvmlDeviceGetPersistenceMode(h))
    ecc = _try(nvml, lambda: nvml.nvmlDeviceGetEccMode(h))  # (current, pending)
    state, status = _fabric(nvml, h)
    graphics, memory = nvml.NVML_CLOCK_GRAPHICS, nvml.NVML_CLOCK_MEM
    return GpuMode(
        index,
        persistence=None if persistence is None else persistence == nvml.NVML_FEATURE_ENABLED,
        ecc_current=None if ecc is None else ecc[0] == nvml.NVML_FEATURE_ENABLED,
        ecc_pending=None if ecc is None else ecc[1] == nvml.NVML_FEATURE_ENABLED,
        fabric_state=state,
        fabric_status=status,
        power_limit_w=_watts(_try(nvml, lambda: nvml.nvmlDeviceGetPowerManagementLimit(h))),
        power_default_w=_watts(_try(nvml, lambda: nvml.nvmlDeviceGetPowerManagementDefaultLimit(h))),
        power_enforced_w=_watts(_try(nvml, lambda: nvml.nvmlDeviceGetEnforcedPowerLimit(h))),
        app_clock_mhz=_int(_try(nvml, lambda: nvml.nvmlDeviceGetApplicationsClock(h, graphics))),
        app_clock_default_mhz=_int(_try(nvml, lambda: nvml.nvmlDeviceGetDefaultApplicationsClock(h, graphics))),
        app_memory_clock_mhz=_int(_try(nvml, lambda: nvml.nvmlDeviceGetApplicationsClock(h, memory))),
        app_memory_clock_default_mhz=_int(_try(nvml, lambda: nvml.nvmlDeviceGetDefaultApplicationsClock(h, memory))),
        compute_mode=_int(_try(nvml, lambda: nvml.nvmlDeviceGetComputeMode(h))),
        pci_bus_id=bus_id(_try(nvml, lambda: nvml.nvmlDeviceGetPciInfo(h).busId) or ""),
    )


def read() -> GpuModes:
    """Every GPU of this node (``nvml_util.node_gpu_indices``)."""
    try:
        import pynvml as nvml

        nvml.nvmlInit()
    except Exception as exc:  # no library, no driver: nothing to read
        return GpuModes(error=f"NVML unusable: {exc}")
    try:
        return GpuModes(tuple(_gpu(nvml, i) for i in node_gpu_indices(int(nvml.nvmlDeviceGetCount()))))
    except nvml.NVMLError as exc:
        return GpuModes(error=f"NVML: {exc}")
    finally:
        nvml.nvmlShutdown()

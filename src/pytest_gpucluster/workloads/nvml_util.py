"""NVML on the node: which physical GPU a task drives, clock-event (throttle) reasons, and a
sampler that watches clocks, temperature, power and throttling while a load runs.

The decoding is pure (bit masks in, names out) and unit-tested against NVML's documented bits.
pynvml and torch are imported inside the functions.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field
from typing import Any

# nvmlClocksEventReason* / nvmlClocksThrottleReason* bits, as NVML's nvml.h defines them.
THROTTLE_BITS: dict[int, str] = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
    0x200: "board_limit",
    0x400: "reliability",
}

# Reasons that mean a sick node: the GPU is too hot, or the board/PSU pulled the power brake.
# "sw_power_cap" is left out on purpose: an H100/H200 under a full GEMM load sits at its power
# limit and the driver trims clocks; that is the design working, not a fault.
FAILING_REASONS = frozenset({"hw_slowdown", "sw_thermal_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown"})


def decode_throttle_reasons(mask: int) -> tuple[str, ...]:
    """Names of the reasons set in ``mask``, lowest bit first; unknown bits as ``bit_0x...``."""
    names = [name for bit, name in THROTTLE_BITS.items() if mask & bit]
    unknown = mask & ~sum(THROTTLE_BITS)
    bit = 1
    while unknown >= bit:
        if unknown & bit:
            names.append(f"bit_{bit:#x}")
        bit <<= 1
    return tuple(names)


def failing_reasons(mask: int) -> tuple[str, ...]:
    """The reasons in ``mask`` that fail a burn test (thermal or hardware power slowdown)."""
    return tuple(n for n in decode_throttle_reasons(mask) if n in FAILING_REASONS)


def physical_index(cuda_index: int, visible: str | None = None) -> int:
    """The host's index (as nvidia-smi numbers it) of CUDA device ``cuda_index``, read from
    CUDA_VISIBLE_DEVICES when it lists plain indices; else ``cuda_index`` itself."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES") if visible is None else visible
    if visible:
        entries = [e.strip() for e in visible.split(",") if e.strip()]
        if cuda_index < len(entries) and all(e.isdigit() for e in entries):
            return int(entries[cuda_index])
    return cuda_index


def nvml_handle(device: Any) -> Any:
    """The NVML handle of a torch CUDA device (by UUID, robust to any CUDA_VISIBLE_DEVICES), or
    None when NVML is unavailable. Calls nvmlInit; the caller owns the matching shutdown."""
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:
        return None
    try:
        import torch

        uuid = str(torch.cuda.get_device_properties(device).uuid)
        return pynvml.nvmlDeviceGetHandleByUUID(uuid if uuid.startswith("GPU-") else f"GPU-{uuid}")
    except Exception:
        try:
            return pynvml.nvmlDeviceGetHandleByIndex(physical_index(device.index or 0))
        except Exception:
            return None


def gpu_label(device: Any, local_rank: int = 0) -> str:
    """``gpuN`` with N the host's GPU index (what an operator sees in nvidia-smi); ``cpuR`` for
    a CPU rank standing in for a GPU (R its local rank)."""
    if getattr(device, "type", "cpu") != "cuda":
        return f"cpu{local_rank}"
    handle = nvml_handle(device)
    if handle is not None:
        try:
            import pynvml

            return f"gpu{int(pynvml.nvmlDeviceGetIndex(handle))}"
        except Exception:
            pass
    return f"gpu{physical_index(device.index or 0)}"


@dataclass(frozen=True)
class NvmlSample:
    """One reading of a GPU under load."""

    t_s: float
    sm_clock_mhz: int
    temperature_c: int
    power_w: float
    reasons_mask: int


@dataclass
class ClockWatcher:
    """Samples one GPU through NVML every ``interval_s`` on a background thread."""

    handle: Any
    interval_s: float = 1.0
    samples: list[NvmlSample] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def _read(self, t0: float) -> None:
        import pynvml

        try:
            getter = (
                getattr(pynvml, "nvmlDeviceGetCurrentClocksEventReasons", None)
                or pynvml.nvmlDeviceGetCurrentClocksThrottleReasons
            )
            self.samples.append(
                NvmlSample(
                    t_s=time.monotonic() - t0,
                    sm_clock_mhz=int(pynvml.nvmlDeviceGetClockInfo(self.handle, pynvml.NVML_CLOCK_SM)),
                    temperature_c=int(pynvml.nvmlDeviceGetTemperature(self.handle, pynvml.NVML_TEMPERATURE_GPU)),
                    power_w=pynvml.nvmlDeviceGetPowerUsage(self.handle) / 1000.0,
                    reasons_mask=int(getter(self.handle)),
                )
            )
        except Exception as exc:  # one failed read must not end the burn; it is reported
            if len(self.errors) < 5:
                self.errors.append(f"{type(exc).__name__}: {exc}")

    def _loop(self) -> None:
        t0 = time.monotonic()
        while not self._stop.is_set():
            self._read(t0)
            self._stop.wait(self.interval_s)

    def start(self) -> None:
        """Begin sampling."""
        self._thread = threading.Thread(target=self._loop, name="nvml-watcher", daemon=True)
        self._thread.start()

    def stop(self) -> list[NvmlSample]:
        """Stop sampling (bounded wait) and return the samples."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=max(5.0, 3 * self.interval_s))
        return list(self.samples)

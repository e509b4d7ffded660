"""NVML on the node: which physical GPU a task drives, clock-event (throttle) reasons, and a
sampler that watches clocks, temperature, power and throttling while a load runs.

The decoding is pure (bit masks in, names out) and unit-tested against NVML's documented bits.
pynvml and torch are imported inside the functions.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Mapping, Sequence
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


# Set in a task's environment where the run's node is part of a machine's GPUs (the local executor
# under a CUDA_VISIBLE_DEVICES of the caller): the node's GPUs as NVML indices, e.g. "2,3". NVML
# sees every GPU of the machine whatever CUDA_VISIBLE_DEVICES says; node-wide readings take these.
NODE_GPUS_ENV = "GPUCLUSTER_NODE_GPUS"


def visible_entries(visible: str) -> list[int | str]:
    """The entries of ``CUDA_VISIBLE_DEVICES=visible`` as CUDA reads them: indices, and GPU UUIDs
    (``GPU-`` and enough of the rest to tell one GPU); a negative index ends the list (``-1``
    exposes none). ValueError naming a MIG device or anything else: CUDA would stop reading there
    and hide the GPUs after it."""
    out: list[int | str] = []
    for entry in (e.strip() for e in visible.split(",")) if visible.strip() else ():
        if entry.lstrip("-").isdigit():
            if int(entry) < 0:
                break
            out.append(int(entry))
        elif entry.upper().startswith("MIG-"):
            raise ValueError(f"{entry!r} is a MIG device; name whole GPUs, by index or GPU- UUID")
        elif entry.startswith("GPU-") and len(entry) > 4:
            out.append(entry)
        else:
            raise ValueError(f"{entry!r} is neither a GPU index nor a GPU- UUID")
    return out


def visible_indices(visible: str, uuids: Sequence[str]) -> tuple[int, ...]:
    """The NVML indices (nvidia-smi's numbering) of the GPUs ``CUDA_VISIBLE_DEVICES=visible``
    exposes (``visible_entries``) on a machine whose GPUs NVML lists with ``uuids``, in the order
    given. ValueError naming the entry for an index past the last GPU, a UUID that fits no GPU or
    several, or a GPU named twice."""
    found: list[int] = []
    for entry in visible_entries(visible):
        if isinstance(entry, int):
            index = entry
            if index >= len(uuids):
                have = f"0-{len(uuids) - 1}" if len(uuids) > 1 else "0" if uuids else "none"
                raise ValueError(f"'{entry}': no GPU {index} on this machine (NVML finds {len(uuids)}: {have})")
        else:
            fits = [i for i, uuid in enumerate(uuids) if uuid.startswith(entry)]
            if len(fits) != 1:
                what = "no GPU on this machine" if not fits else f"GPUs {', '.join(map(str, fits))}"
                raise ValueError(f"{entry!r} fits {what}; give enough of the UUID (nvidia-smi -L) to tell one GPU")
            index = fits[0]
        if index in found:
            raise ValueError(f"'{entry}' names GPU {index} a second time")
        found.append(index)
    return tuple(found)


def node_gpu_indices(count: int, env: Mapping[str, str] | None = None) -> list[int]:
    """The NVML indices of this node's GPUs, of the ``count`` NVML finds: all of them, or where the
    run's node is part of the machine (``NODE_GPUS_ENV``), those."""
    spec = (os.environ if env is None else env).get(NODE_GPUS_ENV)
    if spec is None:
        return list(range(count))
    return [int(e) for e in spec.split(",") if e.strip().isdigit() and int(e) < count]


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

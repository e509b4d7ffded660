"""Will it fit? Checks done on the login node before a job is submitted, so a size that cannot
fit in GPU memory is refused with a sentence instead of an out-of-memory error on every node."""

from __future__ import annotations

import math

from pytest_gpucluster.errors import ConfigError

GiB = 2**30
# What a CUDA context, the allocator's caches and the collective library's buffers take before a
# workload allocates anything; a plan must leave this much of each GPU free.
DEFAULT_RESERVE_BYTES = 2 * GiB


def _gib(n: float) -> str:
    return f"{n / GiB:.2f} GiB"


def check_fits(
    bytes_needed: int | float,
    gpu_memory_bytes: int | float,
    what: str,
    *,
    reserve_bytes: int = DEFAULT_RESERVE_BYTES,
) -> None:
    """Raise ConfigError unless ``bytes_needed`` fits in one GPU's ``gpu_memory_bytes`` with
    ``reserve_bytes`` left over. ``what`` names the setting, e.g. ``"[profiles.x.nccl] max_bytes
    (2 buffers of 64 GiB)"``; the message says how much is needed, how much there is and what
    to lower."""
    for name, value in (("bytes needed", bytes_needed), ("GPU memory", gpu_memory_bytes)):
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
            raise ConfigError(f"{what}: {name} must be a finite number of bytes ≥ 0, got {value!r}.")
    if reserve_bytes < 0:
        raise ConfigError(f"{what}: reserve_bytes must be ≥ 0, got {reserve_bytes!r}.")
    if gpu_memory_bytes == 0:
        raise ConfigError(f"{what}: GPU memory size unknown (0 bytes); cannot check that {_gib(bytes_needed)} fits.")
    usable = gpu_memory_bytes - reserve_bytes
    if bytes_needed > usable:
        raise ConfigError(
            f"{what}: needs {_gib(bytes_needed)} per GPU but a GPU has {_gib(gpu_memory_bytes)} "
            f"({_gib(max(usable, 0))} usable after a {_gib(reserve_bytes)} reserve); lower the size "
            "so the job is not launched only to run out of memory on every node."
        )


# Device memory by NVML model-name fragment, most specific first (what `nvidia-smi` reports as
# total memory; the usable part is smaller, hence the reserve above).
_GPU_MEMORY_MIB: tuple[tuple[str, int], ...] = (
    ("H200", 143771),
    ("H100 NVL", 95830),
    ("H100", 81559),
    ("A100-SXM4-80GB", 81920),
    ("A100 80GB", 81920),
    ("A100", 40960),
)


def gpu_memory_bytes(model: str | None) -> int | None:
    """Device memory of a GPU model by its NVML name, or None when the model is not known."""
    if not model:
        return None
    for fragment, mib in _GPU_MEMORY_MIB:
        if fragment.lower() in model.lower():
            return mib * 2**20
    return None

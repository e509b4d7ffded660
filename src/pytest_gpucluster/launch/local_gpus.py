"""The GPUs of this machine that a run through the local executor may use: every GPU NVML finds,
or those the caller's ``CUDA_VISIBLE_DEVICES`` exposes. They are the node: its GPU count, its
model, the devices its tasks get (submitit's ``visible_gpus``) and what its NVML readings cover
(``nvml_util.NODE_GPUS_ENV``: NVML itself sees every GPU whatever CUDA_VISIBLE_DEVICES says).

Indices are read as NVML and nvidia-smi number the GPUs (PCI bus order); the tasks get
``CUDA_DEVICE_ORDER=PCI_BUS_ID`` so that CUDA numbers them the same way.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from pytest_gpucluster.errors import ConfigError
from pytest_gpucluster.workloads.nvml_util import NODE_GPUS_ENV, visible_entries, visible_indices

VISIBLE = "CUDA_VISIBLE_DEVICES"


@dataclass(frozen=True)
class LocalGpus:
    """The GPUs of this machine a local run uses, and how many NVML finds in all."""

    indices: tuple[int, ...]  # NVML indices, in the order the caller exposed them
    total: int
    model: str | None  # the first used GPU's name; None without one
    visible: str | None = None  # CUDA_VISIBLE_DEVICES as the caller set it; None: not set

    @property
    def restricted(self) -> bool:
        """Whether the caller's CUDA_VISIBLE_DEVICES chose the GPUs."""
        return self.visible is not None

    def describe(self) -> str:
        """``CUDA_VISIBLE_DEVICES=0,1,2: 3 of 4 GPUs`` (empty when not restricted)."""
        if not self.restricted:
            return ""
        found = f"{len(self.indices)} of {self.total} GPUs" if self.total else "no GPU on this machine"
        return f"{VISIBLE}={self.visible}: {found}"

    def task_env(self) -> dict[str, str]:
        """What every task's environment adds: the node's GPUs for node-wide NVML readings, and
        CUDA's numbering set to NVML's. Empty when not restricted."""
        if not self.restricted:
            return {}
        return {NODE_GPUS_ENV: ",".join(map(str, self.indices)), "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}


def read_nvml() -> list[tuple[str, str]]:
    """(UUID, name) of every GPU NVML finds here, in its order; empty without a driver or GPU."""
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:  # no library, no driver: no GPU here
        return []
    try:
        out = []
        for i in range(int(pynvml.nvmlDeviceGetCount())):
            handle = pynvml.nvmlDeviceGetHandleByIndex(i)
            out.append((_text(pynvml.nvmlDeviceGetUUID(handle)), _text(pynvml.nvmlDeviceGetName(handle))))
        return out
    except Exception:  # a GPU fallen off the bus: as before this reading, the machine shows none
        return []
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:
            pass


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def local_gpus(env: Mapping[str, str], gpus: Callable[[], Sequence[tuple[str, str]]] = read_nvml) -> LocalGpus:
    """The GPUs a local run uses, from ``env``'s CUDA_VISIBLE_DEVICES and the machine's ``gpus``
    ((UUID, name) in NVML's order). On a machine without GPUs the variable exposes none, whatever
    it says (an entry no CUDA would read is still refused). ConfigError naming the variable, its
    value and the entry at fault otherwise."""
    found = list(gpus())
    visible = env.get(VISIBLE)
    indices: tuple[int, ...] = tuple(range(len(found)))
    try:
        if visible is not None:
            # On a machine without GPUs the variable exposes none, whatever indices it names.
            indices = visible_indices(visible, [uuid for uuid, _ in found]) if found else ()
            visible_entries(visible)
    except ValueError as exc:
        have = f" ({', '.join(map(str, range(len(found))))})" if found else ""
        raise ConfigError(
            f"{VISIBLE}={visible}: {exc}. The local executor runs on the GPUs it exposes; set it to GPU "
            f"indices{have} or GPU- UUIDs (nvidia-smi -L), or unset it for all."
        ) from None
    model = found[indices[0]][1] if indices else None
    return LocalGpus(indices, len(found), model, visible)


def exposed_count_error(profile: str, declared: int, gpus: LocalGpus) -> ConfigError:
    """A local profile that declares more GPUs per node than the caller exposes."""
    return ConfigError(
        f"profiles.{profile}.gpus_per_node = {declared}, but {gpus.describe()}; expose at least "
        f"{declared} GPUs with {VISIBLE}, or leave gpus_per_node unset to use those exposed."
    )

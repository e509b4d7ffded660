"""``[profiles.NAME.node_config]``: the node settings a profile expects (docs/checks-node-config.md).

A key left unset takes its expectation from the suite's line where one exists (memlock where
RDMA is in use, swap, persistence mode, the governor) or else from the majority of the tested
nodes (``checks.node_config``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Annotated

Bytes = Annotated[int, "bytes"]

# The compute modes a GPU can be set to (nvidia-smi -c), in the order of NVML's nvmlComputeMode_t:
# a mode's index is the number NVML reports for it.
COMPUTE_MODES = ("default", "exclusive_thread", "prohibited", "exclusive_process")

# RLIMIT_MEMLOCK a task needs for RDMA: unlimited, or at least this (the AWS health checks' line).
RDMA_MEMLOCK_BYTES = 16 * 2**30


@dataclass(frozen=True)
class NodeConfig:
    """What the node configuration check expects of every node."""

    # The task's RLIMIT_MEMLOCK (soft) at least this; unset: 16 GiB where RDMA is in use, else
    # the majority of the nodes' value.
    memlock_min: Bytes | None = None
    # The task's RLIMIT_NOFILE (soft) at least this; unset: the majority of the nodes' value.
    nofile_min: int | None = None
    # Whether a node may have swap configured (SwapTotal above 0).
    swap_allowed: bool = False
    # Whether every GPU should be in persistence mode.
    persistence_mode: bool = True
    # Whether ECC should be on; unset: as on the majority of the tested GPUs.
    ecc: bool | None = None
    # The power limit in force on every GPU, in watts, where a site caps its GPUs on purpose;
    # unset: each GPU's own default limit.
    power_limit_w: float | None = None
    # The compute mode every GPU should be in (COMPUTE_MODES).
    compute_mode: str = "default"
    # The CPU frequency governor every CPU should use.
    governor: str = "performance"
    # The interfaces NCCL uses (names or name prefixes, as NCCL_SOCKET_IFNAME lists them); empty:
    # the profile's env NCCL_SOCKET_IFNAME, else the nodes' IPoIB interfaces.
    nccl_interfaces: tuple[str, ...] = ()
    # Their MTU, and that of the RoCE interfaces NCCL's RDMA transport uses; unset: the majority
    # of the nodes' value, per interface.
    mtu: int | None = None
    # Each GPU's NUMA node, by GPU index as nvidia-smi numbers them (``{0 = 0, 4 = 1}``), where the
    # site states its layout; a GPU left out: as on the majority of the tested nodes.
    gpu_numa_nodes: Mapping[str, int] = field(default_factory=dict)
    # Each GPU's nearest NIC (its RDMA device, ``{0 = "mlx5_0"}``), by GPU index; a GPU left out:
    # as on the majority of the tested nodes.
    gpu_nics: Mapping[str, str] = field(default_factory=dict)
    # Whether every node's clock should be kept synchronized by a time daemon (a warning if not).
    clock_synced: bool = True
    # The host memory bandwidth kernel: the three arrays' bytes in all per NUMA node, and passes.
    memory_bytes: Bytes = 512 * 2**20
    memory_passes: int = 5

    def __post_init__(self) -> None:
        if self.nofile_min is not None and self.nofile_min < 1:
            raise ValueError(f"nofile_min: at least 1, got {self.nofile_min}")
        if self.mtu is not None and not 68 <= self.mtu <= 65520:
            raise ValueError(f"mtu: an MTU from 68 to 65520, got {self.mtu}")
        if self.memory_bytes < 2**20:
            raise ValueError(f"memory_bytes: at least 1 MiB, got {self.memory_bytes}")
        if not 1 <= self.memory_passes <= 100:
            raise ValueError(f"memory_passes: from 1 to 100, got {self.memory_passes}")
        if self.power_limit_w is not None and not 50 <= self.power_limit_w <= 5000:
            raise ValueError(f"power_limit_w: a GPU power limit in watts from 50 to 5000, got {self.power_limit_w}")
        if self.compute_mode not in COMPUTE_MODES:
            raise ValueError(f"compute_mode: one of {', '.join(COMPUTE_MODES)}, got {self.compute_mode!r}")
        if not self.governor.strip():
            raise ValueError("governor: name a cpufreq governor, e.g. 'performance'")
        for key, table in (("gpu_numa_nodes", self.gpu_numa_nodes), ("gpu_nics", self.gpu_nics)):
            bad = [k for k in table if not k.isdigit()]
            if bad:
                raise ValueError(
                    f"{key}: keys are GPU indices as nvidia-smi numbers them ({{0 = ..., 1 = ...}}), got {bad[0]!r}"
                )
        for gpu, numa in self.gpu_numa_nodes.items():
            if numa < 0:
                raise ValueError(f"gpu_numa_nodes.{gpu}: a NUMA node, 0 or more, got {numa}")
        for gpu, nic in self.gpu_nics.items():
            if not nic.strip():
                raise ValueError(f"gpu_nics.{gpu}: name the NIC's RDMA device, e.g. 'mlx5_0'")

"""``[profiles.NAME]``: how to reach one cluster and what it should look like.

A profile's ``[training]``, ``[compute]``, ``[sdc]`` and ``[storage]`` tables are the node-side
configs themselves (``TrainConfig``, ``ComputeConfig``, ``SdcConfig``, ``StorageConfig`` of the
workloads), so their defaults are written once; the keys a profile may set are listed here (all of
``StorageConfig``'s).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Annotated, Literal

from pytest_gpucluster.config.fabric_rules import DEFAULT_RULES, FabricRule
from pytest_gpucluster.config.node_config import NodeConfig
from pytest_gpucluster.config.soak import SoakRules, SoakSettings
from pytest_gpucluster.config.topology import Topology
from pytest_gpucluster.workloads.compute import ComputeConfig
from pytest_gpucluster.workloads.fabric_counters import SYSFS_ROOT
from pytest_gpucluster.workloads.sdc import SdcConfig
from pytest_gpucluster.workloads.storage import StorageConfig
from pytest_gpucluster.workloads.training import TrainConfig

# A byte count that thresholds.toml may write as "64MiB".
Bytes = Annotated[int, "bytes"]


@dataclass(frozen=True)
class NcclSettings:
    """How the collective sweep runs (sizes are whole buffers, as nccl-tests counts them)."""

    ops: tuple[str, ...] = ("all_reduce", "all_gather", "reduce_scatter")
    min_bytes: Bytes = 2**20
    max_bytes: Bytes = 8 * 2**30
    judge_from_bytes: Bytes = 2**30
    warmup_iters: int = 5
    iters: int = 20
    timeout_s: int = 600
    retries: int = 1
    nvls: bool = False
    nccl_tests_dir: str | None = None
    # NCCL_ALGO of the across-node sweeps: Ring makes busbw the network's (tree and NVLS-tree
    # algorithms over few nodes read above it); "auto" leaves the choice to NCCL.
    inter_node_algo: str = "Ring"
    # Where the derived across-node lines sit, as fractions of the fabric's line rate (see
    # derived_inter_node and docs/thresholds.md).
    inter_node_fail_fraction: float = 0.75
    inter_node_warn_fraction: float = 0.85


# Judged across nodes whatever ``[nccl] ops`` says, unless ``[nccl_across] ops`` names the collectives.
ACROSS_BY_DEFAULT = "alltoall"


@dataclass(frozen=True)
class NcclAcross:
    """``[profiles.NAME.nccl_across]``: the across-node sweeps' sizes and repetitions, where they
    differ from the intra-node sweep's; a key left unset is taken from ``[nccl]``. A network far
    slower than NVLink (sockets, a test cluster) then gets short across-node sweeps while the
    intra-node sweep keeps the sizes its lines were measured at."""

    # The collectives judged across nodes; unset: ``[nccl] ops`` and alltoall, the traffic of expert
    # parallelism, which sends from every node to every other one where a Ring passes each node
    # boundary once (``across_nodes``).
    ops: tuple[str, ...] | None = None
    min_bytes: Bytes | None = None
    max_bytes: Bytes | None = None
    judge_from_bytes: Bytes | None = None
    warmup_iters: int | None = None
    iters: int | None = None
    timeout_s: int | None = None
    retries: int | None = None
    # The rounds over the switch tree: at most this many groups in one job (None: a round's groups
    # all at once, in one job); a round of more runs as several jobs, one after another.
    groups_at_once: int | None = None


# Keys of ``[nccl_across]`` that are not sweep settings (``across_nodes`` leaves them out).
ROUND_KEYS = ("groups_at_once",)


# The fields of the node-side configs that a profile's [training], [compute] and [sdc] tables may set;
# the others (learning rate, seed, warm-up of the probes, ...) keep the workloads' defaults.
PROFILE_KEYS: Mapping[type, tuple[str, ...]] = {
    TrainConfig: (
        "d_model",
        "n_layers",
        "n_heads",
        "seq_len",
        "vocab",
        "micro_batch",
        "grad_accum",
        "steps",
        "warmup_steps",
        "stability_steps",
        "compile",
        "timeout_s",
    ),
    ComputeConfig: ("matmul_n", "matmul_iters", "copy_bytes", "copy_iters", "burn_s"),
    SdcConfig: ("n", "chain", "seed", "dtype"),
}


@dataclass(frozen=True)
class Handover:
    """``[profiles.NAME.handover]``: who the handover sheet is between and the contract it serves,
    printed on the sheet as written ("": not named)."""

    customer: str = ""
    provider: str = ""
    reference: str = ""  # the order, contract or ticket the acceptance belongs to

    def to_json(self) -> dict[str, str]:
        """The keys that are set, for the results' ``cluster.handover``."""
        return {
            k: v
            for k, v in (("customer", self.customer), ("provider", self.provider), ("reference", self.reference))
            if v
        }


@dataclass(frozen=True)
class Profile:
    """How to reach one cluster and what it should look like."""

    name: str
    executor: Literal["slurm", "local"] = "slurm"
    description: str = ""
    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    # The Slurm reservation the run's jobs run in (a handover's ``flags=maint`` one): its nodes
    # are the ones tested, and MAINTENANCE there is no fault.
    reservation: str | None = None
    # Node features every tested node must have (sbatch --constraint): '&', '|', parentheses.
    constraint: str | None = None
    # The jobs that measure (every job but the light ones: plan/jobs.py) ask for whole nodes
    # (sbatch --exclusive), so no other job shares a node while it is measured.
    exclusive: bool = True
    nodes: int = 1
    nodelist: tuple[str, ...] = ()
    # Slurm's switch tree (topology.conf or ``scontrol show topology`` output), relative to
    # thresholds.toml; the across-node NCCL rounds follow its leaves (plan/rounds.py).
    topology_file: str | None = None
    # The tree that file holds, read once when thresholds.toml is loaded (not a key of the file).
    topology: Topology | None = None
    gpus_per_node: int | None = None  # None: as many as NVML finds (local only)
    # False: GPUs exist only as Slurm GRES (the project's test cluster); jobs then run every
    # workload on the CPU path (gloo), also on a host that has GPUs.
    gpus_are_real: bool = True
    gpu_model: str | None = None
    cpus_per_task: int | None = None
    mem_gb: int | None = None
    shared_fs: str | None = None
    ib_hcas: int = 0
    ib_rate_gbps: float = 400.0
    ib_link_layer: str = "InfiniBand"
    device_cgroups: bool = True
    accounting: bool = True  # false: the cluster runs without slurmdbd (sacct is not judged)
    min_driver: str | None = None
    min_cuda: str | None = None
    expect_kernel: str | None = None  # every node must run exactly this kernel (uname -r)
    expect_memory_gib: float | None = None  # host RAM per node; judged by inventory.memory_spread
    dcgm_level: int = 1
    dcgm_required: bool = False  # true: a node without dcgmi fails; false: DCGM is not applicable there
    # Vendor tools on the nodes: a path to the binary, else the name on the node's PATH; where
    # neither is found the check is not applicable. Each run of a tool is bounded by its timeout.
    nvbandwidth_path: str | None = None
    nvbandwidth_timeout_s: int = 600
    ib_write_bw_path: str | None = None
    ib_write_bw_timeout_s: int = 60
    # true: the slow burn checks belong to the required set (a run without them is PARTIAL)
    require_slow: bool = False
    job_timeout_min: int = 30
    queue_timeout_s: int = 300
    # How long a Slurm daemon may not answer (a controller restart) before the commands that need
    # it give up and the checks they serve are not judged: slurm_retry.py. 0: no retry.
    slurm_retry_s: int = 60
    slurm_conf: str | None = None
    sbatch_extra: Mapping[str, str] = field(default_factory=dict)
    env: Mapping[str, str] = field(default_factory=dict)
    thresholds: str | None = None
    nccl: NcclSettings = field(default_factory=NcclSettings)
    nccl_across: NcclAcross = field(default_factory=NcclAcross)
    training: TrainConfig = field(default_factory=TrainConfig)
    compute: ComputeConfig = field(default_factory=ComputeConfig)
    sdc: SdcConfig = field(default_factory=SdcConfig)
    # The storage job's sizes and bounds (workloads/storage.py, docs/storage.md).
    storage: StorageConfig = field(default_factory=StorageConfig)
    # The soak: its default duration, whether the acceptance requires one, the cycle's work.
    soak: SoakSettings = field(default_factory=SoakSettings)
    # The parties and the contract's reference the handover sheet names.
    handover: Handover = field(default_factory=Handover)
    # How a soak judges each GPU: [soak.rules] with the profile's [soak.rules.RULE] keys over it;
    # and CPU ranks standing in for GPUs: those, then [soak.cpu_rules] and the profile's
    # [soak.cpu_rules.RULE] keys over them (``soak_rules_for`` picks).
    soak_rules: SoakRules = field(default_factory=SoakRules)
    soak_cpu_rules: SoakRules = field(default_factory=SoakRules)
    # Where the fabric check reads the InfiniBand error counters on each node.
    fabric_sysfs_root: str = SYSFS_ROOT
    # The fabric check's rules per counter family: the suite's defaults with the profile's
    # [profiles.NAME.fabric.FAMILY] tables laid over them (config/fabric_rules.py).
    fabric: Mapping[str, FabricRule] = field(default_factory=lambda: DEFAULT_RULES)
    # What the node configuration check expects of every node ([profiles.NAME.node_config]).
    node_config: NodeConfig = field(default_factory=NodeConfig)


def soak_rules_for(profile: Profile, *, real_gpus: bool) -> SoakRules:
    """The rules a soak judges by: the GPU rules where its ranks are GPUs (``real_gpus``, as
    ``SoakSettings.config`` takes it), else those for CPU ranks standing in."""
    return profile.soak_rules if real_gpus else profile.soak_cpu_rules


def node_network_gbps(profile: Profile) -> float | None:
    """The fabric's line rate per node in GB/s (``ib_hcas × ib_rate_gbps / 8``), or None where
    nothing crosses a network: no HCAs, or a single node."""
    if profile.ib_hcas < 1 or profile.nodes < 2:
        return None
    return profile.ib_hcas * profile.ib_rate_gbps / 8


def across_nodes(profile: Profile) -> NcclSettings:
    """The across-node sweeps' settings: ``[nccl]`` with what ``[nccl_across]`` sets laid over it."""
    own = {
        f.name: getattr(profile.nccl_across, f.name) for f in dataclasses.fields(NcclAcross) if f.name not in ROUND_KEYS
    }
    if own["ops"] is None:
        own["ops"] = tuple(dict.fromkeys((*profile.nccl.ops, ACROSS_BY_DEFAULT)))
    return dataclasses.replace(profile.nccl, **{k: v for k, v in own.items() if v is not None})


def sweep_settings(profile: Profile, *, across: bool) -> NcclSettings:
    """The settings of the across-node sweeps (``across``) or of the intra-node ones."""
    return across_nodes(profile) if across else profile.nccl

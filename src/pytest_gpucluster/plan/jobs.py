"""Job requests: the jobs the suite's checks read from, declared whole.

A test states the jobs it uses with ``@pytest.mark.uses(REQUEST)`` (or a module's
``pytestmark``) and receives their values through the ``measured`` fixture. A request is data:
the workload that runs on the nodes, the job's shape in the profile's terms, and what the planner
needs to know (whether it is light, holds GPUs, rides in another job, runs last). ``run.produce``
executes a request by its declaration; the planner reads the same data to order and share jobs.

Every count a job runs with comes from its declaration (``plan/shape.py``); where a count depends
on a plan of the area (the compute or training sizes), the shape names a function declared here
that asks that plan. A check that needs another shape declares another request: the pair's second
isolation job, the nccl-tests binaries' job, the rank-failure job on one node. Such an alternative
is not planned on its own: its area's producer runs it in place of the planned request it names.

The requests of the suite's own areas are declared here, so that a job that may ride inside
another names its host by the request, not by a test.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pytest_gpucluster.config import Profile
from pytest_gpucluster.plan.facts import COMPUTE_RANKS_MATCH as COMPUTE_RANKS_MATCH
from pytest_gpucluster.plan.facts import INTRA_NODE_PEERS as INTRA_NODE_PEERS
from pytest_gpucluster.plan.facts import TORCH_SWEEPS as TORCH_SWEEPS
from pytest_gpucluster.plan.facts import ranks_per_node
from pytest_gpucluster.plan.shape import ALL as ALL
from pytest_gpucluster.plan.shape import EACH as EACH
from pytest_gpucluster.plan.shape import EVERY as EVERY
from pytest_gpucluster.plan.shape import HALF as HALF
from pytest_gpucluster.plan.shape import PER_GPU as PER_GPU
from pytest_gpucluster.plan.shape import PER_TASK as PER_TASK
from pytest_gpucluster.plan.shape import RANKS as RANKS
from pytest_gpucluster.plan.shape import REAL_GPUS as REAL_GPUS
from pytest_gpucluster.plan.shape import Resolved
from pytest_gpucluster.plan.shape import Shape as Shape
from pytest_gpucluster.workloads import (
    collectives,
    dcgm,
    fabric_counters,
    host_checks,
    ib_write_bw,
    infiniband,
    isolation,
    nccl_tests,
    node_probe,
    nvbandwidth,
    pair_exchange,
    placement,
    rank_failure,
    sdc,
    sharedfs,
    storage,
    storage_checkpoint,
    training,
    xid,
)
from pytest_gpucluster.workloads import compute as compute_load
from pytest_gpucluster.workloads import soak as soak_load
from pytest_gpucluster.workloads.compute import ComputePlan, plan_compute
from pytest_gpucluster.workloads.training import TrainingPlan, plan_training


@dataclass(frozen=True)
class JobRequest:
    """One job a check reads from.

    ``light``: it measures no speed, so it may run beside other light jobs and start ahead of the
    first test. ``holds_gpus``: it holds every GPU of its nodes; of those that are light, only one
    starts ahead (``ahead_order`` picks it), since Slurm could start part of a second beside it.
    ``rides_in``: the key of a measuring job this one runs inside, as its first phase, when the
    plan has that job and the facts named in ``ride_needs`` hold (the host's ``host_needs`` too);
    one job fewer is one scheduler start fewer. ``exists_if``: facts without which the run has no
    such job; nodes with fewer GPUs than ``min_gpus`` or more than ``max_gpus`` have none.
    ``runs_last``: it reads what every other job of the run left behind, so the tests that use it
    run after every other test (``planner.last_order``) and it never starts ahead.
    ``after_checks``: it follows the one-shot checks (the soak), ahead of the ``runs_last`` jobs,
    which then read what it left behind too; it never starts ahead.
    ``workload``: the function that runs on the nodes; ``shape``: where; ``args``: the workload's
    keyword arguments, from the profile and the GPUs per node (none if not given); ``env``: the
    variables the job runs with, over the profile's own (a path NCCL is kept to). A job whose
    value needs more than one workload call (retries, rounds of pairs, jobs that must run
    together) has a producer in ``run/areas/`` that says how it calls the workload."""

    key: str
    what: str
    workload: Callable[..., Any] | None = field(default=None, compare=False, repr=False)
    shape: Shape = field(default_factory=Shape)
    args: Callable[[Profile, int], Mapping[str, Any]] | None = field(default=None, compare=False, repr=False)
    light: bool = False
    holds_gpus: bool = False
    rides_in: str | None = None
    ride_needs: tuple[str, ...] = ()
    host_needs: tuple[str, ...] = ()
    ahead_order: int = 100
    exists_if: tuple[str, ...] = ()
    min_gpus: int = 0
    max_gpus: int | None = None
    runs_last: bool = False
    after_checks: bool = False
    env: tuple[tuple[str, str], ...] = ()

    def resolve(self, profile: Profile, gpus_per_node: int) -> Resolved:
        """The job's counts on nodes of ``gpus_per_node`` GPUs of ``profile``. A job that measures
        has its nodes to itself (the profile's ``exclusive``); light jobs run beside each other."""
        counts = self.shape.resolve(profile, gpus_per_node)
        return dataclasses.replace(counts, exclusive=counts.exclusive or (profile.exclusive and not self.light))


def _fabric_args(profile: Profile, gpus_per_node: int) -> dict[str, Any]:
    # NVLink is read through NVML where the profile's GPUs are real and the nodes have some.
    return {"root": profile.fabric_sysfs_root, "nvml": profile.gpus_are_real and gpus_per_node > 0}


def _nvbandwidth_args(profile: Profile, gpus_per_node: int) -> dict[str, Any]:
    return {"path": profile.nvbandwidth_path, "timeout_s": profile.nvbandwidth_timeout_s}


def _dcgm_args(profile: Profile, gpus_per_node: int) -> dict[str, Any]:
    return {"level": profile.dcgm_level}


def _host_args(profile: Profile, gpus_per_node: int) -> dict[str, Any]:
    cfg = profile.node_config
    return {"array_bytes": cfg.memory_bytes, "passes": cfg.memory_passes}


# The counts that a plan of its area decides (``Shape``'s ``Count``): each asks the same planning
# function the area's producer reads its sizes from, so the job and its sizes agree.


def _compute(profile: Profile, gpus_per_node: int) -> ComputePlan:
    return plan_compute(profile.compute, gpus_per_node=gpus_per_node, real_gpus=profile.gpus_are_real)


def _training(profile: Profile, gpus_per_node: int) -> TrainingPlan:
    return plan_training(profile.training, gpus_per_node=gpus_per_node, real_gpus=profile.gpus_are_real)


def compute_ranks(profile: Profile, gpus_per_node: int) -> int:
    """the compute plan's ranks (a GPU each, or CPU ranks)"""
    return _compute(profile, gpus_per_node).ranks_per_node


def compute_gpus(profile: Profile, gpus_per_node: int) -> int:
    """the compute plan's GPUs (none for CPU ranks)"""
    return _compute(profile, gpus_per_node).gpus_per_node


def training_ranks(profile: Profile, gpus_per_node: int) -> int:
    """the training plan's ranks (a GPU each, or CPU ranks)"""
    return _training(profile, gpus_per_node).ranks_per_node


def training_gpus(profile: Profile, gpus_per_node: int) -> int:
    """the training plan's GPUs (none for CPU ranks)"""
    return _training(profile, gpus_per_node).gpus_per_node


def training_one_gpu(profile: Profile, gpus_per_node: int) -> int:
    """one of the training plan's GPUs (none for CPU ranks)"""
    return min(1, training_gpus(profile, gpus_per_node))


def checkpoint_ranks(profile: Profile, gpus_per_node: int) -> int:
    """the checkpoint's ranks ([storage] checkpoint_ranks_per_node, else a rank per GPU)"""
    return profile.storage.checkpoint_ranks_per_node or ranks_per_node(profile, gpus_per_node)


NCCL_INTRA = JobRequest(
    "nccl-intra",
    "every node's intra-node collective sweeps, under the telemetry sampler",
    workload=collectives.collective_sweeps,
    shape=Shape(tasks_per_node=RANKS),
    host_needs=(TORCH_SWEEPS,),
    exists_if=(INTRA_NODE_PEERS,),
)
# NCCL_INTRA's job where the sweeps run nccl-tests' binaries (``[nccl] nccl_tests_dir``, real GPUs:
# the run lacks TORCH_SWEEPS): one process per node drives all of its GPUs.
NCCL_INTRA_TESTS = JobRequest(
    "nccl-intra-tests",
    "every node's intra-node collective sweeps by nccl-tests' binaries, one task driving every GPU",
    workload=nccl_tests.run_nccl_tests,
    exists_if=(INTRA_NODE_PEERS,),
)
NCCL_INTER = JobRequest(
    "nccl-inter",
    "the collective sweeps across every node",
    workload=collectives.collective_sweeps,
    shape=Shape(tasks_per_node=RANKS),
)
# The fabric layer by layer (docs/nccl.md, "Layer by layer"): all_reduce with NCCL kept to one path.
# NVLink alone: peer-to-peer only over NVLink, no shared memory, and no NIC (sockets, were NCCL to
# fall back to a network, read far below the line and name themselves in NCCL's log).
NVLINK_ONLY_ENV = (("NCCL_P2P_LEVEL", "NVL"), ("NCCL_SHM_DISABLE", "1"), ("NCCL_NET", "Socket"))
# The network alone: no peer-to-peer and no shared memory, so every GPU reaches every other one,
# on its node too, through its NIC.
NETWORK_ONLY_ENV = (("NCCL_P2P_DISABLE", "1"), ("NCCL_SHM_DISABLE", "1"))
NCCL_NVLINK_ONLY = JobRequest(
    "nccl-nvlink-only",
    "every node's all_reduce on NVLink alone (NCCL_P2P_LEVEL=NVL, no shared memory, no NIC)",
    workload=collectives.collective_sweeps,
    shape=Shape(tasks_per_node=RANKS),
    exists_if=(INTRA_NODE_PEERS,),
    env=NVLINK_ONLY_ENV,
)
# One job: every node's own communicator, then all nodes on one (``collectives.layered_sweeps``).
NCCL_NETWORK_ONLY = JobRequest(
    "nccl-network-only",
    "all_reduce with every GPU through its NIC: inside every node, then across all nodes",
    workload=collectives.layered_sweeps,
    shape=Shape(tasks_per_node=RANKS),
    env=NETWORK_ONLY_ENV,
)
# The straggler check: neighbour node pairs exchanging at once, round by round (checks/straggler.py),
# after the across-node sweeps in their job where the run has it (same nodes, same ranks).
NEIGHBOUR_PAIRS = JobRequest(
    "neighbour-pairs",
    "send/recv between neighbour node pairs, every pair at once, each node with two partners",
    workload=pair_exchange.exchange_rounds,
    shape=Shape(tasks_per_node=RANKS),
    rides_in=NCCL_INTER.key,
)
NODE_PROBE = JobRequest(
    "node-probe",
    "NVML, InfiniBand, inventory, node settings and vendor tools' presence on every node",
    workload=node_probe.probe_node,
    light=True,
    holds_gpus=True,
    rides_in=NCCL_INTRA.key,
    ahead_order=0,
)
# The host's memory bandwidth per NUMA node and the clock's offset between nodes: one task per
# node, no GPU, measuring (not light: no other job of the run shares the memory bus beside it).
HOST_CHECKS = JobRequest(
    "host-memory-clock",
    "every node's host memory bandwidth per NUMA node and its clock against the first node's",
    workload=host_checks.measure_node,
    shape=Shape(gpus_per_node=0),
    args=_host_args,
)
# The node probe's InfiniBand reading; where the probe's job cannot run (it holds every GPU), a job
# of its own that asks for none reads the ports instead.
INFINIBAND = JobRequest(
    "infiniband",
    "every node's InfiniBand ports: the node probe's reading, or a job asking for no GPU",
    workload=infiniband.read_node,
    shape=Shape(gpus_per_node=0),
    light=True,
    rides_in=NODE_PROBE.key,
)
CEILINGS = JobRequest(
    "compute-ceilings",
    "every GPU's GEMM and device-copy ceilings",
    workload=compute_load.measure_ceilings,
    shape=Shape(tasks_per_node=compute_ranks, gpus_per_node=compute_gpus),
    rides_in=NCCL_INTRA.key,
    ride_needs=(COMPUTE_RANKS_MATCH,),
)
BURN = JobRequest(
    "compute-burn",
    "every GPU under a GEMM load, its clocks sampled",
    workload=compute_load.burn,
    shape=Shape(tasks_per_node=compute_ranks, gpus_per_node=compute_gpus),
)
ISOLATION_PAIR = JobRequest(
    "isolation-pair",
    "two jobs at once, each holding half of every node's GPUs",
    workload=isolation.gpu_view,
    shape=Shape(gpus_per_node=HALF),
    light=True,
    holds_gpus=True,
    ahead_order=1,
    min_gpus=2,
)
# ISOLATION_PAIR's second job where a half has 2 GPUs or more: a task per GPU of its half with
# ``--gpus-per-task=1``, so the pair also serves the one-GPU-per-task check.
ISOLATION_PAIR_PER_TASK = JobRequest(
    "isolation-pair-per-task",
    "the isolation pair's second job: a task per GPU of half the node's GPUs, --gpus-per-task=1",
    workload=isolation.gpu_view,
    shape=Shape(tasks_per_node=HALF, gpus_per_task=1),
    light=True,
    holds_gpus=True,
    ahead_order=1,
    min_gpus=4,
)
ISOLATION_VIEW = JobRequest(
    "isolation-view",
    "what a task sees of its node's one GPU",
    workload=isolation.gpu_view,
    shape=Shape(gpus_per_node=1),
    holds_gpus=True,
    min_gpus=1,
    max_gpus=1,
)
ISOLATION_PER_TASK = JobRequest(
    "isolation-per-task",
    "one task per GPU with --gpus-per-task=1",
    workload=isolation.gpu_view,
    shape=Shape(tasks_per_node=PER_GPU, gpus_per_task=1),
    holds_gpus=True,
    min_gpus=2,
    max_gpus=3,
)
# One task on each of two nodes, so that the failure crosses the network; a GPU per rank where the
# GPUs are real, else CPU ranks (``checks.rank_failure.plan``).
RANK_FAILURE = JobRequest(
    "rank-failure",
    "a collective job in which one rank dies",
    workload=rank_failure.rank_failure,
    shape=Shape(nodes=2, tasks_per_node=1, gpus_per_node=PER_TASK),
    light=True,
    holds_gpus=True,
    ahead_order=2,
)
# RANK_FAILURE's job where only one node is live: two tasks on it.
RANK_FAILURE_ONE_NODE = JobRequest(
    "rank-failure-one-node",
    "a collective job of two ranks on one node in which one rank dies",
    workload=rank_failure.rank_failure,
    shape=Shape(nodes=1, tasks_per_node=2, gpus_per_node=PER_TASK),
    light=True,
    holds_gpus=True,
    ahead_order=2,
)
# Task placement: one request per layout the check asks Slurm for, each asking for no GPU.
PLACEMENT_ONE_TASK = JobRequest(
    "placement-one-task",
    "where the task of a job of one task on one node ran",
    workload=placement.report_placement,
    shape=Shape(nodes=1, gpus_per_node=0),
    light=True,
)
PLACEMENT_TWO_TASKS = JobRequest(
    "placement-two-tasks",
    "where each task of a job of two tasks on one node ran",
    workload=placement.report_placement,
    shape=Shape(nodes=1, tasks_per_node=2, gpus_per_node=0),
    light=True,
)
PLACEMENT_TWO_NODES = JobRequest(
    "placement-two-nodes",
    "where each task of a job of one task on each of two nodes ran",
    workload=placement.report_placement,
    shape=Shape(nodes=2, gpus_per_node=0),
    light=True,
)
# Not light: it takes a task per GPU and their CPUs on every node, which would leave no room for
# the jobs started ahead beside it (the isolation pair's two jobs must run at once).
PLACEMENT_EVERY_NODE = JobRequest(
    "placement-every-node",
    "where each task ran: every node, a task per GPU",
    workload=placement.report_placement,
    shape=Shape(tasks_per_node=PER_GPU, gpus_per_node=0),
)
SHAREDFS = JobRequest(
    "sharedfs",
    "the shared filesystem seen from every node",
    workload=sharedfs.check_node,
    shape=Shape(gpus_per_node=0),
    light=True,
)
# Measures the shared filesystem's speed: not light, so no other job of the run writes beside it.
STORAGE = JobRequest(
    "storage",
    "the shared filesystem's throughput, metadata rate, visibility and locks, every node at once",
    workload=storage.measure_node,
    shape=Shape(gpus_per_node=0),
)
# Every GPU saves and restores its shard of a checkpoint: a rank per GPU, measuring, not light.
STORAGE_CHECKPOINT = JobRequest(
    "storage-checkpoint",
    "every GPU's shard of a model and optimizer saved with torch.distributed.checkpoint, restored, compared",
    workload=storage_checkpoint.save_and_restore,
    shape=Shape(tasks_per_node=checkpoint_ranks),
)
DCGM = JobRequest(
    "dcgm",
    "dcgmi diag on every node, exclusive",
    workload=dcgm.run_diag,
    shape=Shape(exclusive=True),
    args=_dcgm_args,
)
# The training jobs take the training plan's ranks and GPUs (the tiny CPU model's ranks where the
# GPUs are not real).
TRAIN_PER_NODE = JobRequest(
    "train-per-node",
    "each GPU alone, then DDP and FSDP, on every node",
    workload=training.train,
    shape=Shape(nodes=EACH, tasks_per_node=training_ranks, gpus_per_node=training_gpus),
)
TRAIN_BASELINE = JobRequest(
    "train-baseline",
    "one GPU training alone",
    workload=training.train,
    shape=Shape(nodes=1, gpus_per_node=training_one_gpu),
    rides_in=TRAIN_PER_NODE.key,
)
TRAIN_ACROSS = JobRequest(
    "train-across",
    "DDP and FSDP across every node",
    workload=training.train,
    shape=Shape(tasks_per_node=training_ranks, gpus_per_node=training_gpus),
)
TRAIN_STABILITY = JobRequest(
    "train-stability",
    "a long DDP run on every node: loss, NaN/inf and step-time spread",
    workload=training.train,
    shape=Shape(nodes=EACH, tasks_per_node=training_ranks, gpus_per_node=training_gpus),
)
# A task per GPU; where the GPUs are not real, CPU ranks at ``sdc.TINY`` asking for none.
SDC = JobRequest(
    "sdc",
    "the same GEMM chain on every GPU of every node, its bits compared",
    workload=sdc.run,
    shape=Shape(tasks_per_node=RANKS, gpus_per_node=REAL_GPUS),
    holds_gpus=True,
)
NVBANDWIDTH = JobRequest(
    "nvbandwidth",
    "nvbandwidth's host-device and device-device copies on every node",
    workload=nvbandwidth.run_nvbandwidth,
    args=_nvbandwidth_args,
    holds_gpus=True,
)
IB_WRITE_BW = JobRequest(
    "ib-write-bw",
    "ib_write_bw between neighbour node pairs, every active HCA, both ways",
    workload=ib_write_bw.run_pairs,
    shape=Shape(gpus_per_node=0),
)
# Both snapshots hold every GPU of their nodes, so that NVML sees them under device cgroups. The
# before snapshot is first of the light jobs holding GPUs (ahead_order -1): without starting ahead
# it compares nothing, while the others only gain time by it.
FABRIC_BEFORE = JobRequest(
    "fabric-before",
    "every node's InfiniBand and NVLink error counters before the first workload, holding its GPUs",
    workload=fabric_counters.snapshot,
    args=_fabric_args,
    light=True,
    holds_gpus=True,
    ahead_order=-1,
)
FABRIC_AFTER = JobRequest(
    "fabric-after",
    "every node's InfiniBand and NVLink error counters after every other job, holding its GPUs",
    workload=fabric_counters.snapshot,
    args=_fabric_args,
    holds_gpus=True,
    runs_last=True,
)
# Both read last; where the run has the fabric's after snapshot, the kernel log is read in the
# same task (``fabric_counters.snapshot_and_kernel_log``): one job at the end, not two.
XID_LOG = JobRequest(
    "xid-kernel-log",
    "every node's kernel log read for Xid lines, after every other job",
    workload=xid.read_kernel_log,
    shape=Shape(gpus_per_node=0),
    rides_in=FABRIC_AFTER.key,
    runs_last=True,
)

# One job per node for the soak's whole duration (its producer in run/areas/soak.py says how long).
SOAK = JobRequest(
    "soak",
    "a job per node running cycles of load on every GPU for the soak's duration",
    workload=soak_load.soak,
    shape=Shape(nodes=EACH, tasks_per_node=RANKS, gpus_per_node=REAL_GPUS),
    holds_gpus=True,
    after_checks=True,
)

SUITE = (
    NCCL_INTRA,
    NCCL_INTRA_TESTS,
    NCCL_INTER,
    NCCL_NVLINK_ONLY,
    NCCL_NETWORK_ONLY,
    NEIGHBOUR_PAIRS,
    NODE_PROBE,
    HOST_CHECKS,
    INFINIBAND,
    CEILINGS,
    BURN,
    ISOLATION_PAIR,
    ISOLATION_PAIR_PER_TASK,
    ISOLATION_VIEW,
    ISOLATION_PER_TASK,
    RANK_FAILURE,
    RANK_FAILURE_ONE_NODE,
    PLACEMENT_ONE_TASK,
    PLACEMENT_TWO_TASKS,
    PLACEMENT_TWO_NODES,
    PLACEMENT_EVERY_NODE,
    SHAREDFS,
    STORAGE,
    STORAGE_CHECKPOINT,
    DCGM,
    TRAIN_PER_NODE,
    TRAIN_BASELINE,
    TRAIN_ACROSS,
    TRAIN_STABILITY,
    SDC,
    NVBANDWIDTH,
    IB_WRITE_BW,
    FABRIC_BEFORE,
    FABRIC_AFTER,
    XID_LOG,
    SOAK,
)

"""The facts of a run that the suite's job requests name (``TORCH_SWEEPS`` and the others), from
the profile and the GPUs per node alone: decided before any job exists."""

from __future__ import annotations

from pytest_gpucluster.config import Profile
from pytest_gpucluster.workloads.compute import plan_compute

# Facts of a run (``Facts.flags``) that the suite's requests refer to.
TORCH_SWEEPS = "torch_sweeps"  # the intra-node sweeps run in torch (not the nccl-tests binaries)
COMPUTE_RANKS_MATCH = "compute_ranks_match"  # the compute plan takes one task per GPU, as the sweeps
INTRA_NODE_PEERS = "intra_node_peers"  # a node has more than one GPU, or CPU ranks stand in for none

CPU_TASKS_PER_NODE = 2  # without GPUs, two gloo processes per node still make a communicator


def ranks_per_node(profile: Profile, gpus_per_node: int) -> int:
    """One process per GPU; two per node where the GPUs are not real (gloo on CPU)."""
    return gpus_per_node if profile.gpus_are_real and gpus_per_node else CPU_TASKS_PER_NODE


def no_intra_node_collective(gpus_per_node: int) -> str | None:
    """Why the nodes have no intra-node collective, or None: a node of one GPU (a device or a GRES)
    has no peer inside it. Nodes without GPUs have CPU ranks stand in, so they have one."""
    return "node has 1 GPU: no intra-node collective" if gpus_per_node == 1 else None


def no_nic_layer(profile: Profile) -> str | None:
    """Why the nodes have no NIC layer to measure by itself, or None: real GPUs with no
    InfiniBand or RoCE NIC in the profile (``ib_hcas = 0``) would reach each other over sockets on
    the node's Ethernet, which is no GPU's NIC. CPU stand-ins keep the path (gloo, the settings
    recorded), as every other collective of theirs."""
    if profile.gpus_are_real and profile.ib_hcas == 0:
        return "the profile expects no InfiniBand or RoCE NIC (ib_hcas = 0): the GPUs have no NIC to go through"
    return None


def uses_nccl_tests(profile: Profile, gpus_per_node: int) -> bool:
    """Whether the intra-node sweeps run nccl-tests' binaries (``[nccl] nccl_tests_dir``) rather
    than torch: only on real GPUs."""
    return bool(profile.nccl.nccl_tests_dir) and profile.gpus_are_real and gpus_per_node > 0


def flags(profile: Profile, gpus_per_node: int) -> frozenset[str]:
    """Whether the nodes have an intra-node collective, whether its sweeps run in torch (where
    other readings can ride in the job), and whether the compute ceilings take one task per GPU as
    the sweeps do."""
    out = set()
    if no_intra_node_collective(gpus_per_node) is None:
        out.add(INTRA_NODE_PEERS)
    if not uses_nccl_tests(profile, gpus_per_node):
        out.add(TORCH_SWEEPS)
    compute = plan_compute(profile.compute, gpus_per_node=gpus_per_node, real_gpus=profile.gpus_are_real)
    if compute.ranks_per_node == ranks_per_node(profile, gpus_per_node):
        out.add(COMPUTE_RANKS_MATCH)
    return frozenset(out)

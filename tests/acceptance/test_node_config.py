"""Node configuration per node (read once per node by the node probe): the limits a Slurm task
gets, swap, GPU persistence and ECC modes, the GPUDirect RDMA path, the NVSwitch fabric, PCIe ACS
above the GPUs and NICs, a NIC on each GPU's NUMA node, the CPU governor, and the MTU of NCCL's
interfaces across nodes. Each finding names the setting, the value found, the value expected and
how to change it; a setting the node has nothing of is not applicable, with the reason
(docs/checks-node-config.md)."""

from __future__ import annotations

import pytest

from pytest_gpucluster.checks import node_config, node_gpu_config, probe
from pytest_gpucluster.outcomes import not_applicable
from pytest_gpucluster.plan import jobs

pytestmark = pytest.mark.uses(jobs.NODE_PROBE)


@pytest.fixture
def settings(measured):
    """Every node's settings, measured once per run (the node probe)."""
    return probe.part(measured(), "node_config")


def _judge(judged, judge, what):
    if judged.not_applicable:
        not_applicable(judged.not_applicable)
    judge.findings(judged.findings, what)


def _of(settings, node):
    why = probe.missing(settings, node, "node settings")
    if why:
        pytest.fail(why, pytrace=False)
    return settings[node]


def test_task_limits(settings, node, profile, judge):
    _of(settings, node)
    found = node_config.limits(probe.good(settings), node, profile.node_config, ib_hcas=profile.ib_hcas)
    _judge(found, judge, f"{node}: a Slurm task's limits are below what its jobs need")


def test_no_swap(settings, node, profile, judge):
    _judge(node_config.swap(_of(settings, node), profile.node_config), judge, f"{node}: swap configured")


@pytest.mark.gpu
def test_gpu_persistence_and_ecc_modes(settings, node, profile, judge):
    _of(settings, node)
    found = node_gpu_config.gpu_modes_of(
        probe.good(settings), node, profile.node_config, gpus_are_real=profile.gpus_are_real
    )
    _judge(found, judge, f"{node}: GPU modes not as expected")


@pytest.mark.gpu
def test_gpudirect_rdma_path(settings, node, profile, judge):
    found = node_gpu_config.gpudirect(_of(settings, node), gpus_are_real=profile.gpus_are_real, ib_hcas=profile.ib_hcas)
    _judge(found, judge, f"{node}: no GPUDirect RDMA path")


@pytest.mark.gpu
def test_nvswitch_fabric_registered(settings, node, profile, judge):
    found = node_gpu_config.nvswitch_fabric(_of(settings, node), gpus_are_real=profile.gpus_are_real)
    _judge(found, judge, f"{node}: GPUs not registered with the NVLink fabric")


def test_pcie_acs_off_above_gpus_and_nics(settings, node, judge):
    _judge(node_gpu_config.acs(_of(settings, node)), judge, f"{node}: PCIe ACS redirects peer-to-peer traffic")


def test_gpu_numa_node_has_a_nic(settings, node, judge):
    _judge(node_gpu_config.gpu_nic_numa(_of(settings, node)), judge, f"{node}: a GPU has no NIC on its NUMA node")


def test_cpu_frequency_governor(settings, node, profile, judge):
    found = node_config.governor(_of(settings, node), profile.node_config)
    _judge(found, judge, f"{node}: CPU frequency governor")


def test_nccl_interface_mtu_alike(settings, profile, judge):
    found = node_config.mtu(probe.good(settings), profile.node_config, profile.env)
    _judge(found, judge, "MTU of NCCL's interfaces differs between nodes")

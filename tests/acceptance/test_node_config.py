"""Node configuration per node (read once per node by the node probe): the limits a Slurm task
gets, swap, GPU persistence and ECC modes, what caps a GPU's speed by setting (power limit,
applications clocks, compute mode), the GPUDirect RDMA path, the NVSwitch fabric, PCIe ACS
above the GPUs and NICs, each GPU's NUMA node and nearest NIC against the profile or the other
nodes, the CPU governor, and the MTU of NCCL's and the RoCE interfaces across nodes; and,
measured in a job of their own, the host memory bandwidth of each NUMA node and the clock
against the other nodes'.
Each finding names the setting, the value found, the value expected and how to change it; a
setting the node has nothing of is not applicable, with the reason (docs/checks-node-config.md)."""

from __future__ import annotations

import pytest

from pytest_gpucluster.checks import gpu_placement, host_checks, node_config, node_gpu_config, probe
from pytest_gpucluster.outcomes import not_applicable
from pytest_gpucluster.plan import jobs

PROBE = pytest.mark.uses(jobs.NODE_PROBE)
HOST = pytest.mark.uses(jobs.HOST_CHECKS)


@pytest.fixture
def settings(measured):
    """Every node's settings, measured once per run (the node probe)."""
    return probe.part(measured(), "node_config")


@pytest.fixture
def hosted(measured, node):
    """Every node's host report (``run.areas.host.Hosted``), this node's among them."""
    found = measured(jobs.HOST_CHECKS)
    why = probe.missing(found.reports, node, "host memory and clock report")
    if why:
        pytest.fail(why, pytrace=False)
    return found


def _judge(judged, judge, what):
    if judged.not_applicable:
        not_applicable(judged.not_applicable)
    judge.findings(judged.findings, what)


def _of(settings, node):
    why = probe.missing(settings, node, "node settings")
    if why:
        pytest.fail(why, pytrace=False)
    return settings[node]


@PROBE
def test_task_limits(settings, node, profile, judge):
    _of(settings, node)
    found = node_config.limits(probe.good(settings), node, profile.node_config, ib_hcas=profile.ib_hcas)
    _judge(found, judge, f"{node}: a Slurm task's limits are below what its jobs need")


@PROBE
def test_no_swap(settings, node, profile, judge):
    _judge(node_config.swap(_of(settings, node), profile.node_config), judge, f"{node}: swap configured")


@PROBE
@pytest.mark.gpu
def test_gpu_persistence_and_ecc_modes(settings, node, profile, judge):
    _of(settings, node)
    found = node_gpu_config.gpu_modes_of(
        probe.good(settings), node, profile.node_config, gpus_are_real=profile.gpus_are_real
    )
    _judge(found, judge, f"{node}: GPU modes not as expected")


@PROBE
@pytest.mark.gpu
def test_gpu_power_limit_clocks_and_compute_mode(settings, node, profile, judge):
    found = node_gpu_config.gpu_caps_of(_of(settings, node), profile.node_config, gpus_are_real=profile.gpus_are_real)
    _judge(found, judge, f"{node}: a GPU is held below its speed by a setting")


@PROBE
@pytest.mark.gpu
def test_gpudirect_rdma_path(settings, node, profile, judge):
    found = node_gpu_config.gpudirect(_of(settings, node), gpus_are_real=profile.gpus_are_real, ib_hcas=profile.ib_hcas)
    _judge(found, judge, f"{node}: no GPUDirect RDMA path")


@PROBE
@pytest.mark.gpu
def test_nvswitch_fabric_registered(settings, node, profile, judge):
    found = node_gpu_config.nvswitch_fabric(_of(settings, node), gpus_are_real=profile.gpus_are_real)
    _judge(found, judge, f"{node}: GPUs not registered with the NVLink fabric")


@PROBE
def test_pcie_acs_off_above_gpus_and_nics(settings, node, judge):
    _judge(node_gpu_config.acs(_of(settings, node)), judge, f"{node}: PCIe ACS redirects peer-to-peer traffic")


@PROBE
def test_gpu_numa_node_and_nearest_nic(settings, node, profile, judge):
    _of(settings, node)
    found = gpu_placement.gpu_placement(probe.good(settings), node, profile.node_config)
    _judge(found, judge, f"{node}: a GPU sits on another NUMA node or nearest another NIC than expected")


@PROBE
def test_cpu_frequency_governor(settings, node, profile, judge):
    found = node_config.governor(_of(settings, node), profile.node_config)
    _judge(found, judge, f"{node}: CPU frequency governor")


@PROBE
def test_nccl_interface_mtu_alike(settings, profile, judge):
    found = node_config.mtu(probe.good(settings), profile.node_config, profile.env)
    _judge(found, judge, "MTU of NCCL's interfaces differs between nodes")


@HOST
def test_host_memory_bandwidth_per_numa_node(hosted, node, thresholds, judge):
    found = host_checks.memory(hosted.reports, node, thresholds, hosted.job_id)
    judge.attributed(found.verdicts, found.unjudged, found.findings, f"{node}: host memory bandwidth")


@HOST
def test_clock_synchronized_and_in_step(hosted, node, profile, thresholds, judge):
    synced = host_checks.synchronized(hosted.reports[node], profile.node_config)
    offset = host_checks.clock_offset(hosted.reports, node, thresholds, hosted.job_id)
    if synced is None and not (offset.verdicts or offset.unjudged or offset.findings):
        not_applicable(
            f"{node}: no other node's clock to compare with, and its synchronization is not judged (the kernel's "
            "state unreadable, or node_config.clock_synced = false)"
        )
    judge.attributed(offset.verdicts, offset.unjudged, (*(synced or ()), *offset.findings), f"{node}: clock")

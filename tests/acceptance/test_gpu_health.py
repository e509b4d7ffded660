"""GPU health per node (NVML, read in the node-probe job that holds every GPU of every node):
count and model, driver/CUDA versions, ECC and row remapping, NVLink, PCIe, clock-event reasons,
temperatures and memory in use at rest. Each failure names ``node:gpuN``; every bad GPU is listed,
not only the first."""

from __future__ import annotations

import pytest

from pytest_gpucluster.checks import gpu_health, probe
from pytest_gpucluster.plan import jobs

pytestmark = [pytest.mark.gpu, pytest.mark.uses(jobs.NODE_PROBE)]


@pytest.fixture
def nodes_gpus(measured):
    """Every node's NVML readings, measured once per run (the node probe)."""
    return probe.part(measured(), "gpu_health")


def _of(nodes_gpus, node):
    why = probe.missing(nodes_gpus, node, "an NVML report")
    if why:
        pytest.fail(why, pytrace=False)
    return nodes_gpus[node]


def test_gpu_count_and_model(nodes_gpus, node, cluster, judge):
    found = gpu_health.inventory_findings(
        _of(nodes_gpus, node), count=cluster.gpus_per_node, model=cluster.profile.gpu_model
    )
    judge.findings(found, f"{node}: GPUs are not what the profile expects")


def test_driver_and_cuda_versions_agree(nodes_gpus, profile, judge):
    found = gpu_health.version_findings(
        list(probe.good(nodes_gpus).values()), min_driver=profile.min_driver, min_cuda=profile.min_cuda
    )
    judge.findings(found, "driver / CUDA versions")


def test_memory_errors_temperatures_and_memory_at_rest(nodes_gpus, node, judge):
    readings, unsupported = gpu_health.health_readings(_of(nodes_gpus, node))
    judge.findings(unsupported, f"{node}: GPU readings NVML does not support")  # warnings: never fail
    judge.all(readings)


def test_nvlink_pcie_and_clocks(nodes_gpus, node, judge):
    judge.findings(gpu_health.link_findings(_of(nodes_gpus, node)), f"{node}: GPU links or clocks degraded")

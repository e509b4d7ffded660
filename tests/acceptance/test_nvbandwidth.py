"""NVIDIA nvbandwidth where it is installed: on every node at once, its copy-engine host→device,
device→host and device↔device testcases (workloads/nvbandwidth.py), judged per GPU
(checks/nvbandwidth.py): a GPU below its line fails naming ``node:gpuN``, the testcase, the value
and the line; for device↔device each GPU's worst pair is judged, naming both GPUs. Not applicable
on a node without nvbandwidth (the profile's ``nvbandwidth_path``, else the node's PATH), and the
device↔device check on a node of one GPU.
"""

from __future__ import annotations

import pytest

from pytest_gpucluster.checks import nvbandwidth as judging
from pytest_gpucluster.outcomes import not_applicable
from pytest_gpucluster.plan import jobs

# The node probe says where nvbandwidth is: where it is on no node's PATH and the profile names no
# path, no nvbandwidth job is submitted.
pytestmark = [pytest.mark.uses(jobs.NODE_PROBE), pytest.mark.uses(jobs.NVBANDWIDTH)]


@pytest.fixture
def copies(measured):
    """node → (NvbandwidthRun, NodeCopies) and the job id: one job on every node, holding its
    GPUs, for the whole run."""
    return measured(jobs.NVBANDWIDTH)


def _node(copies, node):
    found, _ = copies
    if node not in found:
        pytest.fail(f"{node}: no nvbandwidth result came back (answered: {', '.join(found) or 'none'})", pytrace=False)
    run, read = found[node]
    if not run.found:
        not_applicable(f"nvbandwidth is not installed on {node}: {run.absent}")
    return read


@pytest.mark.gpu
def test_host_device_copies_per_gpu(copies, judge, node):
    read = _node(copies, node)
    unread = read.unread(judging.H2D, judging.D2H)
    judge.findings(unread, f"{node}: nvbandwidth did not measure the host-device copies")
    judge.all(judging.host_device_measurements(read, copies[1]))


@pytest.mark.gpu(2)
def test_gpu_pairs_copy_per_gpu(copies, judge, node):
    read = _node(copies, node)
    if read.gpus == 1 and not read.device_to_device:
        not_applicable(f"nvbandwidth sees one GPU on {node}: no pair to copy between")
    judge.findings(read.unread(judging.D2D), f"{node}: nvbandwidth did not measure the device-to-device copies")
    judge.all(judging.device_to_device_measurements(read, copies[1]))

"""Node inventory and homogeneity.

One job (the node-probe job, shared with GPU health and InfiniBand) inventories every node; each
per-node test judges that node against the others (majority vs minority), against the profile,
and against the CPU/RAM sizing per GPU.
"""

from __future__ import annotations

import pytest

from pytest_gpucluster.checks import homogeneity, probe
from pytest_gpucluster.outcomes import not_applicable
from pytest_gpucluster.plan import jobs
from pytest_gpucluster.verdict import Measurement

pytestmark = pytest.mark.uses(jobs.NODE_PROBE)


@pytest.fixture
def inventory(measured, record):
    """node → summary facts (or why there are none), from one job for the whole run; the full
    inventory is recorded once, with the first test that reads it (recorded by each of the 4 × N
    per-node tests, the run would carry N² node inventories)."""
    found = probe.part(measured(), "inventory")
    answered = probe.good(found)
    record("inventory", once="inventory", nodes={n: inv.to_json() for n, inv in answered.items()})
    return {n: answered[n].summary if n in answered else v for n, v in found.items()}


def _of(inventory, node):
    why = probe.missing(inventory, node, "inventory")
    if why:
        pytest.fail(why, pytrace=False)
    return inventory[node]


@pytest.mark.quick
@pytest.mark.across_nodes
def test_node_matches_the_others(inventory, judge, node):
    _of(inventory, node)
    found = homogeneity.mismatches(probe.good(inventory))
    judge.findings(homogeneity.findings_for(found, node), f"{node} differs from the other nodes")


@pytest.mark.quick
def test_node_matches_the_profile(inventory, profile, judge, node):
    found = homogeneity.profile_findings(
        node,
        _of(inventory, node),
        gpu_model=profile.gpu_model,
        gpus_per_node=profile.gpus_per_node,
        gpus_are_real=profile.gpus_are_real,
        min_driver=profile.min_driver,
        min_cuda=profile.min_cuda,
        expect_kernel=profile.expect_kernel,
    )
    judge.findings(found, f"{node} is not what profile {profile.name!r} describes")


def test_node_memory(inventory, profile, judge, node):
    deviation = homogeneity.memory_deviation(probe.good(inventory), profile.expect_memory_gib).get(node)
    if deviation is None:
        pytest.fail(f"{node}: RAM could not be read ({_of(inventory, node).get('memory_gib')})", pytrace=False)
    judge(Measurement.at("inventory.memory_spread", deviation.percent, "%", node, detail=deviation.detail))


def test_cpus_and_memory_per_gpu(inventory, judge, node):
    sizing = homogeneity.per_gpu_sizing(_of(inventory, node))
    if sizing is None:
        not_applicable(f"{node} has no GPU visible to NVML: CPUs and RAM per GPU do not apply")
    judge.all(
        [
            Measurement.at("inventory.cpus_per_gpu", sizing.cpus_per_gpu, "count", node),
            Measurement.at("inventory.memory_per_gpu", sizing.memory_gib_per_gpu, "GiB", node),
        ]
    )

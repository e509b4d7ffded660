"""A node whose Gres offers fewer GPUs than the profile states (node4 told it has none, on the real
test cluster). Slurm refuses at submission a job over every node that asks node4 for GPUs, so
before it was left out every healthy node's every-node checks failed with it. Now the run leaves
node4 out by name and rejects it as not tested, and node3 runs and is judged on its own."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from faults_support import fault_profile, run_pytest

from gpucluster_testcluster import ClusterInfo, TestCluster

pytestmark = pytest.mark.integration

SHORT = "node4: Slurm reports it offering 0 GPU(s) (Gres=none), fewer than the 4 the profile expects; not tested"


@pytest.fixture
def node4_without_gpus(slurm_cluster: ClusterInfo) -> Iterator[None]:
    """The test cluster with no Gres line for node4; its own shape is brought back afterwards."""
    shape = {"nodes": len(slurm_cluster.nodes), "gpus_per_node": slurm_cluster.gpus_per_node}
    shape |= {"accounting": slurm_cluster.accounting, "install": False}
    TestCluster(**shape, gpuless_nodes=("node4",)).up()
    try:
        yield
    finally:
        TestCluster(**shape).up()


def test_a_node_short_of_gpus_is_rejected_by_name_and_the_other_node_is_tested(node4_without_gpus, tmp_path):
    profile = fault_profile(tmp_path)
    selection = (
        "tests/acceptance/test_slurm_health.py",
        "tests/acceptance/test_inventory.py::test_node_matches_the_profile",
        "tests/acceptance/test_placement.py",
    )
    run = run_pytest(profile, tmp_path, *selection, timeout=180)
    acceptance = run.results["acceptance"]
    nodes = acceptance["nodes"]
    assert run.returncode == 1, run.output[-3000:]
    assert nodes["exclude"] == "node4", nodes
    assert nodes["verdicts"]["node4"]["verdict"] == "REJECTED"
    assert nodes["verdicts"]["node4"]["reasons"][0] == SHORT
    assert nodes["verdicts"]["node3"]["verdict"] in ("ACCEPTED", "PARTIAL"), nodes
    assert run.test("test_node_matches_the_profile[node3]")["verdict"] == "pass"
    assert "submission refused" not in run.output  # no job over both nodes was sent
    # The check that judges what Slurm advertises names node4 first; node3's checks all pass.
    assert acceptance["headline"] == "REJECTED: 1 check failed", acceptance
    assert acceptance["reasons"] == [
        "node4: advertises 0 GPU(s) (Gres=none), expected 4"
        " (test_slurm_health.py::test_nodes_advertise_expected_resources)"
    ]
    assert profile.jobs() == []

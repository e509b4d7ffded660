"""``--drain-failed``: after the run, the node a check rejected is drained in Slurm with the check
and its evidence as the reason, and no other node is touched (node3/node4; the ci profile's
node1/node2 stay undisturbed)."""

from __future__ import annotations

import pytest
from faults_support import fault_profile, restore_nodes, run_pytest, slurm_cmd

pytestmark = pytest.mark.integration

# A per-node check that finds a fault on node4 only: the evidence the drain reason must carry.
PLANTED = """
def test_planted(judge, node):
    judge.problems([f"{node}: planted fault for the drain test"] if node == "node4" else [], "planted")
"""


def reason_of(node: str) -> str:
    out = slurm_cmd("sinfo", "-h", "-N", "-n", node, "-o", "%T|%E")
    return out.strip().splitlines()[0]


def test_drain_failed_drains_exactly_the_rejected_node_with_its_evidence(slurm_cluster, tmp_path):
    profile = fault_profile(tmp_path)
    test_file = tmp_path / "test_planted.py"
    test_file.write_text(PLANTED)
    try:
        run = run_pytest(profile, tmp_path, str(test_file), "--drain-failed", timeout=120)
        node4, node3 = reason_of("node4"), reason_of("node3")
    finally:
        restore_nodes(slurm_cluster)
    assert run.returncode == 1, run.output[-3000:]
    assert run.results["acceptance"]["nodes"]["exclude"] == "node4"
    state, reason = node4.split("|", 1)
    assert "drain" in state, node4
    assert reason.startswith("pytest-gpucluster: rejected: node4: planted fault for the drain test"), node4
    assert "drain" not in node3.split("|", 1)[0], node3
    assert run.results["drained"] == {"node4": {"reason": reason}}
    assert f"drained node4 (--drain-failed): reason {reason!r}" in run.output

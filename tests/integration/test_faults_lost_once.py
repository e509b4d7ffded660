"""A node that dies before the run is learned once: its checks fail naming it with the first
evidence, later jobs run without it, the other node's own checks pass, and the run costs at most
one ``queue_timeout_s`` more than a clean one, not a wait per job (node3/node4; the ci profile's
node1/node2 stay undisturbed)."""

from __future__ import annotations

import pytest
from faults_support import cluster_handle, fault_profile, restore_nodes, run_pytest

pytestmark = pytest.mark.integration

# Light jobs on every node, a per-node check served by the node probe, and a per-node training
# job: three chances to wait on the dead node, each of which must not cost a queue_timeout_s.
# Slurm's own view of the nodes rides along: its shortfall of usable nodes falls on the dead node
# alone, never on its healthy partner.
SELECTION = (
    "tests/acceptance/test_slurm_health.py",
    "tests/acceptance/test_sharedfs.py",
    "tests/acceptance/test_placement.py",
    "tests/acceptance/test_inventory.py",
    "tests/acceptance/test_training.py",
    "-k",
    "nodes_are_usable or sharedfs or placement or matches_the_profile or training_on_node",
)


def test_a_node_dead_before_the_run_costs_one_bounded_wait_and_is_named(slurm_cluster, tmp_path):
    queue_timeout_s = 40
    profile = fault_profile(tmp_path, queue_timeout_s=queue_timeout_s)
    clean = run_pytest(profile, tmp_path, *SELECTION, timeout=300)
    assert clean.results["acceptance"]["verdict"] == "PARTIAL", clean.output[-3000:]
    cluster = cluster_handle(slurm_cluster)
    try:
        cluster.kill_slurmd("node4", with_jobs=True)
        dead = run_pytest(profile, tmp_path, *SELECTION, timeout=400)
    finally:
        profile.cancel_all()
        restore_nodes(slurm_cluster)
    doc = dead.results
    assert dead.returncode == 1 and doc["acceptance"]["verdict"] == "REJECTED", dead.output[-4000:]
    # The first jobs' launch on node4 fails after Slurm's MessageTimeout (10 s here), and a job
    # on node3 alone waits while Slurm ends those on node4 (about as long again, then started at
    # once rather than at the next backfill pass): no job waits out queue_timeout_s.
    assert dead.seconds <= clean.seconds + queue_timeout_s, (dead.seconds, clean.seconds)
    assert not [t for t in doc["tests"] if "still PENDING after" in (t["message"] or "")], dead.output[-4000:]
    seen = doc["environment"]["lost_nodes"]["node4"]
    assert seen["when"] and seen["how"], seen
    assert "node3" not in doc["environment"]["lost_nodes"]
    # node3's own checks pass; one that needs both nodes fails naming node4, never node3.
    for t in doc["tests"]:
        if t["params"].startswith("node3"):
            assert t["verdict"] in ("pass", "warn"), t
        elif t["verdict"] == "fail":
            assert "node4" in t["message"] and "task 0 on node3" not in t["message"], t
    on_node4 = [t for t in doc["tests"] if t["params"].startswith("node4")]
    assert on_node4 and all(t["verdict"] == "fail" and "node4" in t["message"] for t in on_node4)
    assert all("node4" in r for r in doc["acceptance"]["reasons"])
    verdicts = {n: v["verdict"] for n, v in doc["acceptance"]["nodes"]["verdicts"].items()}
    assert verdicts["node4"] == "REJECTED" and verdicts["node3"] != "REJECTED", verdicts
    assert doc["acceptance"]["nodes"]["exclude"] == "node4"

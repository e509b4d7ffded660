"""A node that dies before the run is learned once: its checks fail naming it with the first
evidence, later jobs run without it, and the run costs one ``queue_timeout_s`` and Slurm's
detection of the failed launch more than a clean one, not a wait per job (node3/node4; the ci
profile's node1/node2 stay undisturbed)."""

from __future__ import annotations

import pytest
from faults_support import cluster_handle, fault_profile, restore_nodes, run_pytest

pytestmark = pytest.mark.integration

# Light jobs on every node, a per-node check served by the node probe, and a per-node training
# job: three chances to wait on the dead node, each of which must not cost a queue_timeout_s.
SELECTION = (
    "tests/acceptance/test_sharedfs.py",
    "tests/acceptance/test_placement.py",
    "tests/acceptance/test_inventory.py",
    "tests/acceptance/test_training.py",
    "-k",
    "sharedfs or placement or matches_the_profile or training_on_node",
)


def test_a_node_dead_before_the_run_costs_one_bounded_wait_and_is_named(slurm_cluster, tmp_path):
    queue_timeout_s = 20
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
    # One queue wait (a job behind one still ending on node4) plus the time Slurm takes to end the
    # first job whose launch on node4 fails (srun's message timeout): not one wait per later job.
    launch_failure_s = 30
    assert dead.seconds <= clean.seconds + queue_timeout_s + launch_failure_s, (dead.seconds, clean.seconds)
    seen = doc["environment"]["lost_nodes"]["node4"]
    assert seen["when"] and seen["how"], seen
    assert "node3" not in doc["environment"]["lost_nodes"]
    # node3's checks pass, or (a job that spanned both nodes, or waited behind one still ending on
    # node4) fail naming node4, never node3 as the culprit.
    for t in doc["tests"]:
        if t["params"].startswith("node3"):
            assert t["verdict"] in ("pass", "warn", "n/a") or "node4" in t["message"], t
    on_node4 = [t for t in doc["tests"] if t["params"].startswith("node4")]
    assert on_node4 and all(t["verdict"] in ("fail", "error") and "node4" in t["message"] for t in on_node4)
    assert all(r for r in doc["acceptance"]["reasons"] if "node4" in r)

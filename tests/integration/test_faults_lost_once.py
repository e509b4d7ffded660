"""A node that dies before the run is learned once: its checks fail naming it with the first
evidence, later jobs run without it, the other node's own checks pass, and the run costs at most
one ``queue_timeout_s`` more than a clean one, not a wait per job (node3/node4; the ci profile's
node1/node2 stay undisturbed)."""

from __future__ import annotations

import json

import pytest
from faults_support import (
    cluster_handle,
    fault_profile,
    finish,
    restore_nodes,
    run_pytest,
    slurm_cmd,
    start_suite,
    wait_until,
)

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
    # node3 is judged in full on what was selected: neither rejected nor left unjudged for node4
    assert verdicts["node4"] == "REJECTED" and verdicts["node3"] in ("ACCEPTED", "PARTIAL"), verdicts
    assert doc["acceptance"]["nodes"]["exclude"] == "node4"


def test_a_partner_lost_while_the_node_probe_waits_costs_the_other_node_nothing(slurm_cluster, tmp_path):
    # node4 busy with another run of the suite (whose jobs this run takes turns with), so the
    # probe's job over node3 and node4 waits PENDING; node4 then dies. The job is cancelled at
    # once for node4 and run again on node3 alone: node3's readings are judged, node4 is
    # rejected, and node3 is neither rejected nor left unjudged.
    profile = fault_profile(tmp_path, queue_timeout_s=90)
    holder = slurm_cmd(
        "sbatch", "--parsable", "--exclusive", "-w", "node4", "-p", "debug", "-J", "gpucluster-another-run-busy",
        "--chdir=/tmp", "--output=/dev/null", "--time=5", "--wrap", "sleep 300",
    ).strip().split(";")[0]  # fmt: skip
    cluster = cluster_handle(slurm_cluster)
    try:
        wait_until(
            "the job on node4 running", lambda: "RUNNING" in slurm_cmd("squeue", "-h", "-j", holder, "-o", "%T"), 30
        )
        proc, results = start_suite(
            profile, tmp_path, "tests/acceptance/test_inventory.py", "-k", "matches_the_profile"
        )
        wait_until("the probe's job pending", lambda: any(j["state"] == "PENDING" for j in profile.jobs()), 60)
        cluster.kill_slurmd("node4", with_jobs=True)
        output = finish(proc, 240)
    finally:
        slurm_cmd("scancel", holder, check=False)
        profile.cancel_all()
        restore_nodes(slurm_cluster)
    doc = json.loads(results.read_text())
    verdicts = {t["params"]: t for t in doc["tests"]}
    assert verdicts["node3"]["verdict"] == "pass", (verdicts["node3"], output[-3000:])
    assert verdicts["node4"]["verdict"] == "fail" and "node4" in verdicts["node4"]["message"], verdicts["node4"]
    nodes = doc["acceptance"]["nodes"]
    assert nodes["verdicts"]["node4"]["verdict"] == "REJECTED" and nodes["exclude"] == "node4", nodes
    assert nodes["verdicts"]["node3"]["verdict"] not in ("REJECTED", "INCOMPLETE"), nodes
    probes = [j for t in doc["tests"] for j in t["jobs"] if "node-probe" in j["name"]]
    assert len({j["job_id"] for j in probes}) == 2, probes  # cancelled once, run once more

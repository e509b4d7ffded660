"""Bounded queue waits and sick nodes, produced for real on node3/node4 of the test cluster: a
job Slurm cannot start is cancelled after queue_timeout_s with Slurm's own reason, and a drained
node is left out of the run with its reason, which the skipped tests repeat."""

from __future__ import annotations

import re
import uuid

import pytest
from faults_support import FAULT_NODES, fault_profile, restore_nodes, run_pytest, slurm_cmd

pytestmark = pytest.mark.integration


def test_a_job_slurm_cannot_start_is_cancelled_after_queue_timeout_with_slurms_reason(slurm_cluster, tmp_path):
    # A reservation for another user holds node3/node4: Slurm keeps the job PENDING with a reason,
    # while the nodes themselves look healthy (idle), so the run does select them.
    profile = fault_profile(tmp_path, queue_timeout_s=8)
    resv = f"faults-{uuid.uuid4().hex[:8]}"
    slurm_cmd(
        "scontrol",
        "create",
        "reservation",
        f"reservationname={resv}",
        "starttime=now",
        "duration=5",
        f"nodes={','.join(FAULT_NODES)}",
        "users=nobody",
    )
    try:
        run = run_pytest(profile, tmp_path, "tests/acceptance/test_placement.py", "-k", "2nodes", timeout=120)
    finally:
        slurm_cmd("scontrol", "delete", f"reservationname={resv}", check=False)
        profile.cancel_all()
    test = run.test("2nodes-1task-each")
    # The job was started ahead; the test meets its failure where it reads the value (measured).
    assert test["outcome"] == "failed", run.output
    assert re.search(
        r"job \d+ \(\w+-placement-two-nodes\): still PENDING after 8 s: "
        r"ReqNodeNotAvail, May be reserved for other job; "
        r"cancelled\. Check the partition's nodes \(sinfo\) or raise queue_timeout_s\.",
        test["message"],
    ), test["message"]
    assert run.returncode == 1
    assert run.seconds < 60, f"took {run.seconds:.0f} s"
    assert profile.jobs() == []  # cancelled, not left queued


def test_a_drained_node_is_left_out_with_its_reason_and_its_tests_say_so(slurm_cluster, tmp_path):
    profile = fault_profile(tmp_path)
    slurm_cmd("scontrol", "update", "nodename=node4", "state=drain", "reason=faults test: bad DIMM")
    try:
        run = run_pytest(
            profile,
            tmp_path,
            "tests/acceptance/test_placement.py",
            "tests/acceptance/test_inventory.py::test_node_matches_the_profile",
            "tests/acceptance/test_inventory.py::test_node_matches_the_others",
            timeout=180,
        )
    finally:
        restore_nodes(slurm_cluster)
        profile.cancel_all()
    assert run.results["nodes"] == ["node3"], run.output
    # Slurm may add flags (IDLE+DRAIN+PLANNED); the reason is the operator's own words.
    why = run.results["environment"]["excluded_nodes"]["node4"]
    assert re.fullmatch(r"IDLE\+DRAIN[A-Z_+]* \(faults test: bad DIMM\)", why), why
    two_nodes = run.test("2nodes-1task-each")
    assert two_nodes["outcome"] == "skipped"
    assert two_nodes["message"] == (
        f"Skipped: profile 'faults' expects 2 nodes, 1 usable (node4: {why}); this check needs 2"
    )
    assert run.test("1node-1task")["outcome"] == "passed", run.output
    assert run.test("test_node_matches_the_profile[node3]")["outcome"] == "passed", run.output[-6000:]
    on_node4 = run.test("test_node_matches_the_profile[node4]")
    assert on_node4["outcome"] == "skipped"
    assert on_node4["message"] == f"Skipped: node4 is excluded: Slurm reports it {why}"
    # node3 beside no usable node: nothing to compare it with, not applicable to it (node4's
    # state is node4's), so node3 is judged in full on what ran, never left unjudged for node4.
    alone = run.test("test_node_matches_the_others[node3]")
    assert alone["message"] == f"Skipped: not applicable: node3 has no other node to be judged with (node4: {why})"
    assert alone["verdict"] == "n/a", alone
    assert run.results["acceptance"]["nodes"]["verdicts"]["node3"]["verdict"] == "PARTIAL", run.results["acceptance"]
    assert run.results["acceptance"]["nodes"]["verdicts"]["node4"]["unfinished"] is True
    # No job of the run ever went to node4.
    assert all("node4" not in str(j.get("nodes", "")) for t in run.results["tests"] for j in t.get("jobs", []))
    assert profile.jobs() == []

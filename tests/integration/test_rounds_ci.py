"""The across-node rounds over a switch tree, run through Slurm: four nodes under two simulated
leaves (a profile's ``topology_file``), the path between the leaves slowed with tc (what node1 and
node2 send to node3 and node4 limited to 1 MB/s). The rounds run as jobs, the slow groups between
the leaves are measured once more, the path between the two leaves is named as a link, and no
node is rejected or left out for it. A node that dies under the whole-cluster round is named as
lost, and no other node, switch or link is convicted for it."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from faults_support import (
    SHARED,
    cluster_handle,
    fault_profile,
    finish,
    restore_nodes,
    run_pytest,
    start_suite,
    wait_until,
)

from pytest_gpucluster.checks.rounds import groups_of

pytestmark = pytest.mark.integration

NODES = ("node1", "node2", "node3", "node4")
TREE = "SwitchName=leafa Nodes=node[1-2]\nSwitchName=leafb Nodes=node[3-4]\nSwitchName=spine Switches=leafa,leafb\n"
# gloo's all_reduce between two test-cluster nodes (one GPU each: two CPU ranks) at 128–256 KiB: 0.012–0.04 GB/s
# on the loaded 2-core machine; over the path slowed to 8 Mbit/s: about 0.001 GB/s. The line
# between them, for this test only.
LINE = """
[thresholds.rounds-ci]
extends = "cpu"
"nccl.all_reduce.inter_node" = { unit = "GB/s", fail_below = 0.004, source = "this test: above 8 Mbit/s" }
[profiles.faults.nccl]
ops = ["all_reduce"]
min_bytes = "128KiB"
max_bytes = "256KiB"
judge_from_bytes = "128KiB"
warmup_iters = 1
iters = 2
timeout_s = 30
retries = 0
"""


def test_a_slow_path_between_two_leaves_is_named_as_the_link(slurm_cluster, tmp_path):
    tree = tmp_path / "topology.conf"
    tree.write_text(TREE)
    profile = fault_profile(
        tmp_path,
        extra_text=LINE,
        nodes=4,
        nodelist=list(NODES),
        gpus_per_node=1,
        thresholds="rounds-ci",
        topology_file=str(tree),
        job_timeout_min=3,  # a slowed round takes 15-20 s on the loaded machine; Slurm's warning comes at 135 s
    )
    cluster = cluster_handle(slurm_cluster)
    try:
        for node in ("node3", "node4"):
            cluster.slow_path(node, ("node1", "node2"), "8mbit")
        run = run_pytest(profile, tmp_path, "tests/acceptance/test_nccl.py", "-k", "across_nodes and all_reduce")
    finally:
        for node in ("node3", "node4"):
            cluster.slow_path(node, (), None)
        profile.cancel_all()
    test = run.test("test_busbw_across_nodes[all_reduce]")
    assert test["outcome"] == "failed", run.output
    links = [f for f in test["findings"] if f["scope"] == "link"]
    assert [f["culprits"] for f in links] == [["leafa", "leafb"]], test["findings"]
    assert not [f for f in test["findings"] if f["scope"] == "node"], test["findings"]
    groups = groups_of(test["rounds"])
    assert [(g.stage, g.nodes) for g in groups if g.stage != "inside leaves"] == [
        ("between leaves", ("node1", "node3")),
        ("between leaves", ("node2", "node4")),
        ("whole cluster", NODES),
    ]
    inside = [g.busbw for g in groups if g.stage == "inside leaves"]
    assert len(inside) == 2 and min(inside) > 0.004, groups
    # Measured once more on their own before the link was named, and slow again.
    again = {number: line.split() for number, line in test["rounds"]["again"]}
    assert list(again) == [2] and len(again[2]) == 2, test["rounds"]["again"]
    assert all(0 < float(word.partition("=")[2]) < 0.004 for word in again[2]), again
    acceptance = run.results["acceptance"]
    assert acceptance["verdict"] == "REJECTED"
    verdicts = acceptance["nodes"]["verdicts"]
    assert sorted(verdicts) == list(NODES) and "REJECTED" not in {v["verdict"] for v in verdicts.values()}, verdicts
    assert not acceptance["nodes"]["exclude"], acceptance["nodes"]


def test_the_dry_run_asks_slurm_for_its_tree_where_the_profile_names_none(slurm_cluster, tmp_path):
    """The test cluster's Slurm has no topology plugin: the dry run says so and plans the pairing."""
    profile = fault_profile(
        tmp_path, extra_text=LINE, nodes=4, nodelist=list(NODES), gpus_per_node=1, thresholds="rounds-ci"
    )
    run = run_pytest(
        profile, tmp_path, "tests/acceptance/test_nccl.py", "-k", "across_nodes and all_reduce", "--gpucluster-dry-run"
    )
    assert run.returncode == 0, run.output
    said = "fabric: no switch tree: the profile names no topology_file, and `scontrol show topology` printed none"
    assert said in run.output
    assert "fabric: no topology_file; one group of all 4 nodes" in run.output


def whole_round_running(profile, proc, since: float) -> str | None:
    """The id of the whole-cluster round's job (round 3 of two leaves) once a task on every node
    is inside the workload (submitit logged its start)."""
    assert proc.poll() is None, proc.communicate()[0]
    job = next(
        (j["id"] for j in profile.jobs() if j["state"] == "RUNNING" and j["name"].endswith("-nccl-round3")), None
    )
    if job is None:
        return None
    logs = [
        p
        for p in Path(SHARED, ".pytest-gpucluster").glob(f"*/jobs/*/*/*/{job}_*_log.out")
        if p.stat().st_mtime >= since
    ]
    started = sum("Starting with JobEnvironment" in p.read_text(errors="replace") for p in logs)
    return job if started >= len(NODES) else None


def test_a_node_lost_under_the_whole_cluster_round_is_named_and_convicts_no_one_else(slurm_cluster, tmp_path):
    tree = tmp_path / "topology.conf"
    tree.write_text(TREE)
    profile = fault_profile(
        tmp_path,
        extra_text=LINE,
        nodes=4,
        nodelist=list(NODES),
        gpus_per_node=1,
        thresholds="rounds-ci",
        topology_file=str(tree),
        job_timeout_min=3,
    )
    proc, results = start_suite(profile, tmp_path, "tests/acceptance/test_nccl.py", "-k", "across_nodes and all_reduce")
    cluster = cluster_handle(slurm_cluster)
    since = time.time() - 1
    try:
        wait_until("the whole-cluster round's tasks running", lambda: whole_round_running(profile, proc, since), 240)
        cluster.kill_slurmd("node4", with_jobs=True)
        out = finish(proc, timeout=240)
    finally:
        if proc.poll() is None:
            proc.kill()
        profile.cancel_all()
        restore_nodes(slurm_cluster)
    doc = json.loads(results.read_text())
    (test,) = [t for t in doc["tests"] if t["nodeid"].endswith("test_busbw_across_nodes[all_reduce]")]
    assert test["outcome"] == "failed", out[-4000:]
    findings = test["findings"]
    own = [f for f in findings if f["scope"] == "node" and f["severity"] == "fail"]
    assert [f["culprits"] for f in own] == [["node4"]], findings
    assert "node4 was lost under round 3's job (the whole cluster)" in own[0]["text"], own
    assert not [f for f in findings if f["scope"] in ("switch", "link")], findings
    # What the rounds before it measured is recorded; the whole cluster has no result.
    groups = groups_of(test["rounds"])
    assert [g.busbw is not None for g in groups] == [True, True, True, True, False], groups
    verdicts = {n: v["verdict"] for n, v in doc["acceptance"]["nodes"]["verdicts"].items()}
    assert verdicts["node4"] == "REJECTED", verdicts
    assert [n for n, v in verdicts.items() if v == "REJECTED"] == ["node4"], verdicts

"""The across-node rounds over a switch tree, run through Slurm: four nodes under two simulated
leaves (a profile's ``topology_file``), the path between the leaves slowed with tc (what node1 and
node2 send to node3 and node4 limited to 1 MB/s). The rounds run as jobs, the slow groups between
the leaves are measured once more, the path between the two leaves is named as a link, and no
node is rejected or left out for it."""

from __future__ import annotations

import pytest
from faults_support import cluster_handle, fault_profile, run_pytest

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

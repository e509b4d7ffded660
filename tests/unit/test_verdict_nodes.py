"""Node verdicts (``verdict.nodes``) from the node × check matrix (``verdict.attribution``), and the
handover merge of a re-test into an earlier run (``verdict.merge``)."""

from __future__ import annotations

from result_docs import document as _doc
from result_docs import measurement as _m
from result_docs import record_of_test as _t

from pytest_gpucluster import verdict
from pytest_gpucluster.verdict.attribution import nodes_in


def test_each_node_gets_its_verdict_and_the_rejected_ones_a_hostlist():
    tests = [
        _t("a::test_gpu[gpu-03]", "fail", params="gpu-03", problems=["gpu-03: mlx5_2 port 1 is DOWN"]),
        _t("a::test_gpu[gpu-11]", "pass", params="gpu-11"),
        _t("a::test_gpu[gpu-12]", "skip", params="gpu-12", message="Skipped: no result"),
        _t("a::test_bw", "fail", [_m("nccl.x", 0, "fail", "gpu-11:gpu1")]),
        _t("a::test_fabric", "fail", message="all_reduce across nodes = 12 GB/s is below the fail line"),
    ]
    doc = {
        **_doc(tests, nodes=("gpu-03", "gpu-11", "gpu-12", "gpu-13")),
        "environment": {"lost_nodes": {"gpu-13": {"why": "DOWN", "when": "t", "job": "7", "how": "x"}}},
    }
    nodes = verdict.node_verdicts(doc, "REJECTED")
    verdicts = {v.node: v.verdict for v in nodes.verdicts}
    assert verdicts == {"gpu-03": "REJECTED", "gpu-11": "REJECTED", "gpu-12": "INCOMPLETE", "gpu-13": "REJECTED"}
    assert nodes.exclude == "gpu-[03,11,13]"
    assert nodes.summary == (
        "0 of 4 nodes accepted; rejected: gpu-[03,11,13]; not judged in full: gpu-12; 1 failure(s) name no single node"
    )
    assert nodes.cluster_wide == ("test_fabric: fail: all_reduce across nodes = 12 GB/s is below the fail line",)
    by_node = {v.node: v.reasons for v in nodes.verdicts}
    # the problem once, with the check that found it; not again without it
    assert by_node["gpu-03"] == ("gpu-03: mlx5_2 port 1 is DOWN (test_gpu[gpu-03])",)
    assert by_node["gpu-13"] == ("gpu-13: lost during the run: DOWN",)


def test_a_counter_family_is_one_reason_per_node_and_cause_in_results_and_node_verdicts():
    crc = [
        f"{n}:gpu{g} link {link}: nvlink_crc_flit_errors rose 0 → {1 + link} (+{1 + link}, at most +0 allowed)"
        for n in ("node1", "node10")
        for g in range(4)
        for link in range(18)
    ]
    tests = [
        _t("a::test_fabric[node1]", "fail", params="node1", problems=[*crc[:72], "node1: mlx5_0 port 1 is DOWN"]),
        _t("a::test_fabric[node10]", "fail", params="node10", problems=crc[72:]),
        _t("a::test_fabric[node2]", "pass", params="node2"),
    ]
    doc = _doc(tests)
    acc = verdict.acceptance(doc)
    line = "gpu0–3 link 0–17: nvlink_crc_flit_errors rose 0 → 1–18 (+1–18, at most +0 allowed)"
    assert acc.reasons == (
        f"node1:{line} (a::test_fabric[node1]) (×72)",
        "node1: mlx5_0 port 1 is DOWN (a::test_fabric[node1])",
        f"node10:{line} (a::test_fabric[node10]) (×72)",
    )
    assert [(f.count, f.nodeid) for f in acc.findings] == [
        (72, "a::test_fabric[node1]"),
        (1, "a::test_fabric[node1]"),
        (72, "a::test_fabric[node10]"),
    ]
    reasons = {v.node: v.reasons for v in verdict.node_verdicts(doc, acc.verdict).verdicts}
    assert reasons["node1"] == (
        f"node1:{line} (test_fabric[node1]) (×72)",
        "node1: mlx5_0 port 1 is DOWN (test_fabric[node1])",
    )
    assert reasons["node10"] == (f"node10:{line} (test_fabric[node10]) (×72)",)
    assert reasons["node2"] == ()


def test_a_failed_pair_convicts_only_the_node_its_isolation_names():
    undetermined = _m("nccl.all_reduce.inter_node", 1.4, "fail", "node1+node2")
    undetermined["sentence"] = (
        "node1+node2: nccl.all_reduce.inter_node (...; isolation: could not isolate node1, "
        "node2: with two nodes ...) = 1.4 GB/s is below the fail line 5 GB/s"
    )
    nodes = verdict.node_verdicts(_doc([_t("a::test_across", "fail", [undetermined])], nodes=("node1", "node2")))
    assert {v.node: v.verdict for v in nodes.verdicts} == {"node1": "ACCEPTED", "node2": "ACCEPTED"}
    assert nodes.cluster_wide == (undetermined["sentence"],)
    isolated = {
        **undetermined,
        "sentence": "node1+node2+node3: x (isolation: bad node(s): node3 (failed when "
        "paired with a known-good node)) = 1 GB/s is below the fail line 5 GB/s",
    }
    isolated["where"] = "node1+node2+node3"
    doc = _doc([_t("a::test_across", "fail", [isolated])], nodes=("node1", "node2", "node3"))
    verdicts = {v.node: v.verdict for v in verdict.node_verdicts(doc).verdicts}
    assert verdicts == {"node1": "ACCEPTED", "node2": "ACCEPTED", "node3": "REJECTED"}


def test_matrix_puts_results_on_the_node_they_name():
    tests = [
        _t("a::test_gpu[node2]", "fail", params="node2"),
        _t("a::test_bw", "fail", [_m("nccl.x", 1, "pass", "node1:gpu0"), _m("nccl.x", 0, "fail", "node10:gpu1")]),
        _t("a::test_whole", "error", message="job 7 vanished"),
        _t("a::test_ib", "fail", problems=["node1: mlx5_0 port 1 is DOWN"]),
    ]
    m = verdict.matrix(_doc(tests))
    assert m.rows == ("node1", "node2", "node10", verdict.CLUSTER_ROW)
    status = {(r, c[1]): m.cell(r, c).status for r in m.rows for c in m.columns}
    assert status[("node2", "test_gpu")] == "fail" and status[("node1", "test_gpu")] == "none"
    assert status[("node1", "test_bw")] == "pass" and status[("node10", "test_bw")] == "fail"
    assert status[(verdict.CLUSTER_ROW, "test_bw")] == "none"  # explained by node10
    assert status[(verdict.CLUSTER_ROW, "test_whole")] == "error"
    assert status[("node1", "test_ib")] == "fail"
    assert nodes_in("node10:gpu1", ["node1", "node10"]) == ["node10"]


def test_a_failure_caused_by_a_lost_node_leaves_the_healthy_node_incomplete_not_rejected():
    """node2 died before the run: node1's per-node jobs that spanned node2, and the comparison
    left with one node, failed because of node2. node2 is rejected; node1 is not judged in full."""
    tests = [
        _t("a::test_probe[node1]", "fail", params="node1", message="x-intra: not submitted: node2: unreachable"),
        _t("a::test_alike[node1]", "error", params="node1", message="1 node(s) left after losing node2: DOWN"),
        _t("a::test_probe[node2]", "error", params="node2", message="node2 was lost earlier in this run"),
        _t("a::test_mem[node1]", "pass", params="node1"),
    ]
    doc = {
        **_doc(tests, nodes=("node1", "node2")),
        "environment": {"lost_nodes": {"node2": {"why": "unreachable", "when": "t", "job": "7", "how": "x"}}},
    }
    nodes = verdict.node_verdicts(doc, "REJECTED")
    assert {v.node: v.verdict for v in nodes.verdicts} == {"node1": "INCOMPLETE", "node2": "REJECTED"}
    assert nodes.exclude == "node2"
    node1 = next(v for v in nodes.verdicts if v.node == "node1")
    assert all(r.startswith("not judged: node2 lost or left out") for r in node1.reasons), node1.reasons
    # A failure of node1's own still rejects it.
    own = [*tests, _t("a::test_gpu[node1]", "fail", params="node1", problems=["node1:gpu0: ECC errors"])]
    doc = {**doc, **_doc(own, nodes=("node1", "node2")), "environment": doc["environment"]}
    assert {v.node: v.verdict for v in verdict.node_verdicts(doc).verdicts}["node1"] == "REJECTED"


def test_hostlist_is_what_sbatch_exclude_takes():
    assert verdict.hostlist(["node2"]) == "node2"
    assert verdict.hostlist(["gpu-03", "gpu-11", "gpu-12"]) == "gpu-[03,11-12]"
    assert verdict.hostlist(["node1", "node2", "node10"]) == "node[1-2,10]"
    assert verdict.hostlist([]) == ""


def _earlier(verdicts, cluster_wide=()):
    return {
        "started": "2026-01-01T00:00:00+00:00",
        "acceptance": {"nodes": {"verdicts": verdicts, "cluster_wide": list(cluster_wide)}},
    }


def _now(tests, nodes):
    doc = _doc(tests, nodes=nodes)
    return {**doc, "acceptance": {"nodes": verdict.node_verdicts(doc).to_json()}}


def test_a_retest_that_passed_the_deciding_check_again_is_accepted_the_others_keep_their_verdict():
    earlier = _earlier(
        {
            "node1": {"verdict": "REJECTED", "reasons": ["node1: planted"], "checks": ["test_planted"]},
            "node2": {"verdict": "ACCEPTED", "reasons": [], "checks": []},
        }
    )
    now = _now([_t("a::test_planted[node1]", "pass", params="node1")], ("node1",))
    merged = verdict.handover(earlier, "first.json", now, "again.json")
    assert merged["verdict"] == "ACCEPTED" and merged["summary"] == "2 of 2 nodes accepted"
    assert merged["retested"] == ["node1"] and merged["exclude"] == ""
    assert merged["nodes"]["node1"]["from"] == "again.json" and merged["nodes"]["node2"]["from"] == "first.json"


def test_a_retest_without_the_deciding_check_is_incomplete_and_a_standing_fault_rejects():
    earlier = _earlier({"node1": {"verdict": "REJECTED", "reasons": ["x"], "checks": ["test_planted"]}})
    skipped = verdict.handover(
        earlier, "a", _now([_t("a::test_other[node1]", "pass", params="node1")], ("node1",)), "b"
    )
    assert skipped["verdict"] == "INCOMPLETE"
    assert skipped["nodes"]["node1"]["reasons"][0].startswith("node1: the re-test did not pass again test_planted")
    bad = _t("a::test_planted[node1]", "fail", params="node1", problems=["node1: planted"])
    rejected = verdict.handover(earlier, "a", _now([bad], ("node1",)), "b")
    assert rejected["verdict"] == "REJECTED" and rejected["exclude"] == "node1"


def test_a_failure_no_node_explains_stands_until_a_run_without_it():
    earlier = _earlier({"node1": {"verdict": "ACCEPTED"}}, cluster_wide=["test_fabric: fail: slow"])
    merged = verdict.handover(earlier, "a", _now([_t("a::test_x[node1]", "pass", params="node1")], ("node1",)), "b")
    assert merged["verdict"] == "INCOMPLETE" and merged["cluster_wide"] == ["test_fabric: fail: slow"]

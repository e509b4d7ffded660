"""Node verdicts (``verdict.nodes``) from the placements of typed findings (``verdict.attribution``),
and the handover merge of a re-test into an earlier run (``verdict.merge``). Every document here
is written by hand in the shape the results file has; the sentences carry no node a verdict
reads (a sentence may name a node it is not about: only the fields count)."""

from __future__ import annotations

from result_docs import document as _doc
from result_docs import finding as _f
from result_docs import handover
from result_docs import measurement as _m
from result_docs import record_of_test as _t

from pytest_gpucluster import verdict
from pytest_gpucluster.results import codec


def _verdicts(doc, run=""):
    return {v.node: v.verdict for v in verdict.node_verdicts(codec.decode_run(doc), run).verdicts}


def test_each_node_gets_its_verdict_and_the_rejected_ones_a_hostlist():
    tests = [
        _t("a::test_gpu[gpu-03]", "fail", node="gpu-03", findings=[_f("port down", node="gpu-03", port="mlx5_2/1")]),
        _t("a::test_gpu[gpu-11]", "pass", node="gpu-11"),
        _t("a::test_gpu[gpu-12]", "not_judged", node="gpu-12", message="Skipped: no result"),
        _t("a::test_bw", "fail", [_m("nccl.x", 0, "fail", "gpu-11", gpu=1)]),
    ]
    doc = {
        **_doc(tests, nodes=("gpu-03", "gpu-11", "gpu-12", "gpu-13")),
        "environment": {"lost_nodes": {"gpu-13": {"why": "DOWN", "when": "t", "job": "7", "how": "x"}}},
    }
    nodes = verdict.node_verdicts(codec.decode_run(doc), "REJECTED")
    assert _verdicts(doc) == {"gpu-03": "REJECTED", "gpu-11": "REJECTED", "gpu-12": "INCOMPLETE", "gpu-13": "REJECTED"}
    assert nodes.exclude == "gpu-[03,11,13]"
    assert nodes.summary == "0 of 4 nodes accepted; rejected: gpu-[03,11,13]; not judged in full: gpu-12"
    by_node = {v.node: v.reasons for v in nodes.verdicts}
    assert by_node["gpu-03"] == ("port down (test_gpu[gpu-03])",)  # the finding once, with its check
    assert by_node["gpu-13"] == ("gpu-13: lost during the run: DOWN",)


def test_a_sentence_naming_a_node_does_not_convict_it():
    # Rewording a sentence cannot move a verdict: the culprit is a field.
    says_node2 = _f("node2 is fine, bad node(s): node2", node="node1")
    doc = _doc([_t("a::test_x[node1]", "fail", node="node1", findings=[says_node2])], nodes=("node1", "node2"))
    assert _verdicts(doc) == {"node1": "REJECTED", "node2": "ACCEPTED"}


def test_a_failure_of_the_nodes_together_without_a_culprit_is_the_clusters_on_no_node():
    undetermined = _m("nccl.all_reduce.inter_node", 1.4, "fail", "node1+node2")
    doc = _doc([_t("a::test_across", "fail", [undetermined])], nodes=("node1", "node2"))
    nodes = verdict.node_verdicts(codec.decode_run(doc))
    assert _verdicts(doc) == {"node1": "ACCEPTED", "node2": "ACCEPTED"}
    assert nodes.cluster_wide == (f"{undetermined['sentence']} (test_across)",)
    assert nodes.summary == "2 of 2 nodes accepted; 1 failure(s) name no single node"


def test_a_failure_of_the_nodes_together_convicts_only_its_isolated_culprit():
    isolated = _m("nccl.x", 1, "fail", "node1+node2+node3", culprits=["node3"])
    doc = _doc([_t("a::test_across", "fail", [isolated])], nodes=("node1", "node2", "node3"))
    assert _verdicts(doc) == {"node1": "ACCEPTED", "node2": "ACCEPTED", "node3": "REJECTED"}


def test_a_check_across_nodes_failing_beside_a_bad_node_names_it_and_not_its_partner():
    """node2's shared filesystem is its own; the rank-failure job over node1 and node2 then failed
    with no culprit of its own: it names node2, and node1 stays accepted on the rest."""
    tests = [
        _t("a::test_sharedfs", "fail", findings=[_f("node2: shared_fs is not shared", node="node2")]),
        _t("a::test_rank", "fail", findings=[_f("no rank reached the point of failure", nodes=["node1", "node2"])]),
        _t("a::test_gpu[node1]", "pass", node="node1"),
    ]
    doc = _doc(tests, nodes=("node1", "node2"))
    nodes = verdict.node_verdicts(codec.decode_run(doc))
    assert _verdicts(doc) == {"node1": "ACCEPTED", "node2": "REJECTED"}
    assert nodes.cluster_wide == ()
    reasons = {v.node: v.reasons for v in nodes.verdicts}["node2"]
    assert reasons == (
        "node2: shared_fs is not shared (test_sharedfs)",
        "no rank reached the point of failure (test_rank)",
    )


def test_a_culprit_of_a_failure_of_several_nodes_is_bad_already_for_the_next_one():
    """node3 is the culprit of a difference from the majority; a failure of node2 and node3
    together with no culprit of its own then names node3, not the cluster."""
    tests = [
        _t(
            "a::test_versions",
            "fail",
            findings=[_f("driver differs", nodes=["node1", "node2", "node3"], culprits=["node3"])],
        ),
        _t("a::test_pair", "fail", findings=[_f("pair slow", nodes=["node2", "node3"])]),
    ]
    nodes = verdict.node_verdicts(codec.decode_run(_doc(tests, nodes=("node1", "node2", "node3"))))
    assert {v.node: v.verdict for v in nodes.verdicts} == {
        "node1": "ACCEPTED",
        "node2": "ACCEPTED",
        "node3": "REJECTED",
    }
    assert nodes.cluster_wide == ()
    assert {v.node: v.reasons for v in nodes.verdicts}["node3"] == (
        "driver differs (test_versions)",
        "pair slow (test_pair)",
    )


def test_a_lost_node_names_the_checks_across_nodes_and_leaves_per_node_partners_not_judged():
    """node2 was lost: the across-node check that failed with it is put on node2; node1's per-node
    check that read a job over both and failed on node2's account leaves node1 not judged."""
    lost_job = _f("job 7 ended FAILED: task 1 on node2: no result", nodes=["node1", "node2"], culprits=["node2"])
    tests = [
        _t("a::test_alike", "fail", findings=[_f("1 node(s) left after losing node2", nodes=["node1", "node2"])]),
        _t("a::test_probe[node1]", "fail", node="node1", findings=[lost_job]),
        _t("a::test_probe[node2]", "fail", node="node2", findings=[lost_job]),
        _t("a::test_mem[node1]", "pass", node="node1"),
    ]
    doc = {
        **_doc(tests, nodes=("node1", "node2")),
        "environment": {"lost_nodes": {"node2": {"why": "unreachable", "when": "t", "job": "7", "how": "x"}}},
    }
    nodes = verdict.node_verdicts(codec.decode_run(doc), "REJECTED")
    assert _verdicts(doc) == {"node1": "INCOMPLETE", "node2": "REJECTED"}
    assert nodes.exclude == "node2"
    node1 = next(v for v in nodes.verdicts if v.node == "node1")
    assert node1.reasons == ("not judged: failed on account of node2 (test_probe[node1])",)
    # A failure of node1's own still rejects it.
    own = [*tests, _t("a::test_gpu[node1]", "fail", node="node1", findings=[_f("ECC", node="node1", gpu=0)])]
    assert _verdicts({**doc, "tests": own})["node1"] == "REJECTED"


def test_a_job_failing_alike_on_every_node_convicts_none():
    every = _f("job 9: task 0 on node1: Bootstrap : no socket interface found", nodes=["node1", "node2"])
    doc = _doc([_t("a::test_busbw[node1]", "fail", node="node1", findings=[every])], nodes=("node1", "node2"))
    nodes = verdict.node_verdicts(codec.decode_run(doc))
    assert _verdicts(doc) == {"node1": "INCOMPLETE", "node2": "ACCEPTED"} and nodes.exclude == ""
    assert len(nodes.cluster_wide) == 1


def test_outside_the_nodes_the_nodes_it_kept_from_judgement_are_incomplete_and_none_rejected():
    held = _f("other work held node1 past queue_timeout_s (45 s): job 13 of bob", scope="queue", nodes=["node1"])
    config = _f("NCCL_SOCKET_IFNAME=ib9 matches no interface", scope="config", nodes=["node1", "node2"])
    tests = [
        _t("a::test_gpu[node1]", "fault", node="node1", findings=[{**held, "severity": "not_judged"}]),
        _t("a::test_across", "fault", findings=[{**held, "severity": "not_judged"}]),
        _t("a::test_gpu[node2]", "pass", node="node2"),
    ]
    doc = _doc(tests, nodes=("node1", "node2"))
    assert _verdicts(doc) == {"node1": "INCOMPLETE", "node2": "ACCEPTED"}
    busbw = _t("a::test_busbw", "not_judged", findings=[{**config, "severity": "not_judged"}])
    both = _doc([*tests, busbw], nodes=("node1", "node2"))
    nodes = verdict.node_verdicts(codec.decode_run(both))
    assert _verdicts(both) == {"node1": "INCOMPLETE", "node2": "INCOMPLETE"} and nodes.exclude == ""


def test_matrix_puts_results_on_the_node_fields_name():
    tests = [
        _t("a::test_gpu[node2]", "fail", node="node2"),
        _t("a::test_bw", "fail", [_m("nccl.x", 1, "pass", "node1", gpu=0), _m("nccl.x", 0, "fail", "node10", gpu=1)]),
        _t("a::test_whole", "not_judged", message="Skipped: job 7 vanished"),
        _t("a::test_ib", "fail", findings=[_f("mlx5_0 port 1 is DOWN", node="node1", port="mlx5_0/1")]),
    ]
    m = verdict.matrix(codec.decode_run(_doc(tests)))
    assert m.rows == ("node1", "node2", "node10", verdict.CLUSTER_ROW)
    status = {(r, c[1]): m.cell(r, c).status for r in m.rows for c in m.columns}
    assert status[("node2", "test_gpu")] == "fail" and status[("node1", "test_gpu")] == "none"
    assert status[("node10", "test_bw")] == "fail"
    assert status[(verdict.CLUSTER_ROW, "test_bw")] == "none"  # explained by node10
    assert status[(verdict.CLUSTER_ROW, "test_whole")] == "not_judged"
    assert status[("node1", "test_ib")] == "fail"
    assert codec.decode_matrix(codec.encode_matrix(m)) == m


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
    return {**doc, "acceptance": {"nodes": codec.encode_nodes(verdict.node_verdicts(codec.decode_run(doc)))}}


def test_a_retest_that_passed_the_deciding_check_again_is_accepted_the_others_keep_their_verdict():
    earlier = _earlier(
        {
            "node1": {"verdict": "REJECTED", "reasons": ["node1: planted"], "checks": ["test_planted"]},
            "node2": {"verdict": "ACCEPTED", "reasons": [], "checks": []},
        }
    )
    now = _now([_t("a::test_planted[node1]", "pass", node="node1")], ("node1",))
    merged = handover(earlier, "first.json", now, "again.json")
    assert merged["verdict"] == "ACCEPTED" and merged["summary"] == "2 of 2 nodes accepted"
    assert merged["retested"] == ["node1"] and merged["exclude"] == ""
    assert merged["nodes"]["node1"]["from"] == "again.json" and merged["nodes"]["node2"]["from"] == "first.json"


def test_a_retest_without_the_deciding_check_is_incomplete_and_a_standing_fault_rejects():
    earlier = _earlier({"node1": {"verdict": "REJECTED", "reasons": ["x"], "checks": ["test_planted"]}})
    skipped = handover(earlier, "a", _now([_t("a::test_other[node1]", "pass", node="node1")], ("node1",)), "b")
    assert skipped["verdict"] == "INCOMPLETE"
    assert skipped["nodes"]["node1"]["reasons"][0].startswith("node1: the re-test did not pass again test_planted")
    bad = _t("a::test_planted[node1]", "fail", node="node1", findings=[_f("planted", node="node1")])
    rejected = handover(earlier, "a", _now([bad], ("node1",)), "b")
    assert rejected["verdict"] == "REJECTED" and rejected["exclude"] == "node1"


def test_a_failure_no_node_explains_stands_until_a_run_without_it():
    earlier = _earlier({"node1": {"verdict": "ACCEPTED"}}, cluster_wide=["test_fabric: fail: slow"])
    merged = handover(earlier, "a", _now([_t("a::test_x[node1]", "pass", node="node1")], ("node1",)), "b")
    assert merged["verdict"] == "INCOMPLETE" and merged["cluster_wide"] == ["test_fabric: fail: slow"]


def test_a_node_left_out_or_lost_is_marked_unfinished_and_a_rejected_nodes_unjudged_checks_kept():
    # What a re-test must pass for a node comes from these fields (``verdict.merge``): a node left
    # out or lost never reached some checks; a node rejected by one check and not judged by another
    # must pass both again.
    tests = [
        _t("a::test_gpu[node1]", "fail", node="node1", findings=[_f("gpu slow", node="node1")]),
        _t("a::test_nccl[node1]", "not_judged", node="node1", message="Skipped: no result"),
        _t("a::test_gpu[node2]", "pass", node="node2"),
    ]
    doc = {
        **_doc(tests, nodes=("node1", "node2", "node3", "node4")),
        "environment": {
            "lost_nodes": {"node3": {"why": "DOWN", "when": "t", "job": "7", "how": "x"}},
            "excluded_nodes": {"node4": "DRAIN (bad DIMM)"},
        },
    }
    by_node = {v.node: v for v in verdict.node_verdicts(codec.decode_run(doc), "REJECTED").verdicts}
    assert (by_node["node1"].checks, by_node["node1"].unjudged, by_node["node1"].unfinished) == (
        ("test_gpu",),
        ("test_nccl",),
        False,
    )
    assert by_node["node3"].unfinished and by_node["node4"].unfinished and not by_node["node2"].unfinished
    nodes = verdict.node_verdicts(codec.decode_run(doc), "REJECTED")
    encoded = codec.encode_nodes(nodes)["verdicts"]
    assert encoded["node1"]["unjudged"] == ["test_nccl"] and "unfinished" not in encoded["node1"]
    assert encoded["node4"]["unfinished"] is True
    assert codec.decode_nodes({"verdicts": encoded}).verdicts == nodes.verdicts

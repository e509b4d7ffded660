"""The across-node rounds judged (checks/rounds.py): every group's busbw against the line, what
the rounds name as findings of its own scope, and the node verdicts those findings leave: a slow
switch or link convicts no node. The tree is the recorded one-spine topology.conf."""

from __future__ import annotations

import json
from pathlib import Path

from result_docs import document, record_of_test

from pytest_gpucluster import verdict
from pytest_gpucluster.checks.nccl import unmeasured
from pytest_gpucluster.checks.rounds import GroupResult, Lost, group_results, groups_of, judge_rounds, remeasure
from pytest_gpucluster.config.topology import read_topology
from pytest_gpucluster.plan.rounds import RoundPlan, plan_rounds
from pytest_gpucluster.results import codec
from pytest_gpucluster.workloads.busbw import SizeResult, SweepResult

DATA = Path(__file__).resolve().parents[1] / "data" / "topology"
TREE = read_topology(DATA / "topology-one-spine_representative_sample.conf")  # leaf1–leaf4 of 16 under spine
NODES = [n for leaf in TREE.leaves for n in leaf.nodes]
PLAN = plan_rounds(NODES, TREE)
LINE = 40.0
METRIC = "nccl.all_reduce.inter_node"
PARENTS = {leaf.name: "spine" for leaf in TREE.leaves}


def measured(plan: RoundPlan, is_slow) -> list[GroupResult]:
    return [
        GroupResult(i, g, 12.0 if is_slow(g) else 45.0) for i, r in enumerate(plan.rounds, start=1) for g in r.groups
    ]


def judged(results):
    return judge_rounds(PLAN, results, op="all_reduce", metric=METRIC, fail_below=LINE, parents=PARENTS)


def verdicts_of(found):
    test = record_of_test(
        "test_nccl.py::test_busbw_across_nodes[all_reduce]",
        "fail",
        findings=[codec.encode_finding(f) for f in found.findings],
    )
    doc = document([test], nodes=NODES)
    return {v.node: v.verdict for v in verdict.node_verdicts(codec.decode_run(doc), "REJECTED").verdicts}


def test_a_slow_path_between_two_leaves_is_a_link_finding_and_convicts_no_node():
    found = judged(measured(PLAN, lambda g: set(g.leaves) == {"leaf1", "leaf3"} or len(g.leaves) == 4))
    (link,) = found.findings
    assert (link.scope, link.culprits, link.convicts) == ("link", ("leaf1", "leaf3"), ())
    assert set(link.nodes) == set(TREE.switches["leaf1"].nodes) | set(TREE.switches["leaf3"].nodes)
    assert link.value == 12.0 and link.metric == METRIC
    assert "path between leaves leaf1 and leaf3" in link.text
    assert set(verdicts_of(found).values()) == {"ACCEPTED"}


def test_a_slow_leaf_is_a_switch_finding_and_its_nodes_stay_accepted():
    found = judged(measured(PLAN, lambda g: "leaf2" in g.leaves))
    (switch,) = found.findings
    assert (switch.scope, switch.culprits, switch.convicts) == ("switch", ("leaf2",), ())
    assert set(verdicts_of(found).values()) == {"ACCEPTED"}


def test_slow_uplinks_name_the_leaf_and_the_switch_above_it():
    found = judged(measured(PLAN, lambda g: "leaf4" in g.leaves and len(g.leaves) > 1))
    (uplinks,) = found.findings
    assert (uplinks.scope, uplinks.culprits) == ("link", ("leaf4", "spine"))
    assert uplinks.place == "leaf4–spine"


def test_a_slow_node_is_the_nodes_own_finding_and_the_only_node_rejected():
    found = judged(measured(PLAN, lambda g: "node23" in g.nodes))
    (node,) = found.findings
    assert (node.scope, node.culprits) == ("node", ("node23",))
    verdicts = verdicts_of(found)
    assert [n for n, v in verdicts.items() if v == "REJECTED"] == ["node23"]


def test_every_group_fast_names_nothing():
    found = judged(measured(PLAN, lambda g: False))
    assert found.findings == () and found.localisation is not None and not found.localisation.culprits


def test_a_wrong_result_is_a_finding_of_its_group_and_not_read_as_slow():
    results = measured(PLAN, lambda g: False)
    results[0] = GroupResult(1, results[0].group, 45.0, ("2 of 4 ranks returned wrong values",))
    found = judged(results)
    (wrong,) = found.findings
    assert wrong.scope == "nodes" and wrong.nodes == results[0].group.nodes and wrong.culprits == ()
    assert "round 1" in wrong.text


def test_without_a_line_nothing_is_named_slow():
    found = judge_rounds(
        PLAN, measured(PLAN, lambda g: True), op="all_reduce", metric=METRIC, fail_below=None, parents={}
    )
    assert found.findings == () and found.localisation is None


def test_the_record_holds_every_group_by_round_and_what_was_named():
    found = judged(measured(PLAN, lambda g: set(g.leaves) == {"leaf1", "leaf3"} or len(g.leaves) == 4))
    record = found.to_json()
    assert record["leaves"]["leaf2"] == list(TREE.switches["leaf2"].nodes)
    assert record["stages"] == ["inside leaves", *["between leaves"] * 3, "whole cluster"]
    assert record["groups"][0].startswith("0+1=45 2+3=45 ")  # round 1: node01+node02, node03+node04, ...
    back = groups_of(json.loads(json.dumps(record)))
    assert [(g.round, g.nodes, g.leaves, g.busbw) for g in back] == [
        (r.round, r.group.nodes, tuple(x for x in ("leaf1", "leaf2", "leaf3", "leaf4") if x in r.group.leaves), r.busbw)
        for r in found.results
    ]
    assert {g.stage for g in back} == {"inside leaves", "between leaves", "whole cluster"}
    (culprit,) = record["culprits"]
    assert (culprit["kind"], culprit["name"], len(culprit["nodes"]), len(culprit["rounds"])) == (
        "link",
        "leaf1–leaf3",
        32,
        1,
    )


def sweep(nodes, busbw, op="all_reduce"):
    rows = tuple(SizeResult(2**s, 2**s // 4, p, 10.0, busbw, busbw, 0) for s in (20, 21) for p in (False, True))
    nodes = tuple(nodes)
    return SweepResult(op, nodes, 2 * len(nodes), "gloo", op, rows, 1, 3)


def test_each_group_is_found_in_its_rounds_results_by_its_nodes():
    small = plan_rounds(["node01", "node02", "node17", "node33"], TREE)  # leaf1: 2 nodes, leaf2 and leaf3: 1
    groups = [(i, g) for i, r in enumerate(small.rounds, start=1) for g in r.groups]
    sweeps = {i: [sweep(reversed(g.nodes), 2.0 + i), sweep(g.nodes, 9.0, op="all_gather")] for i, g in groups if i != 2}
    found = group_results(small, sweeps, "all_reduce", lambda s: s.rows[0].busbw)
    assert [(r.round, r.busbw) for r in found] == [(i, None if i == 2 else 2.0 + i) for i, _ in groups]
    judged_small = judge_rounds(small, found, op="all_reduce", metric=METRIC, fail_below=1.0, parents={})
    (unmeasured,) = judged_small.findings  # round 2 returned nothing: not judged, not slow
    assert unmeasured.severity == "not_judged" and set(unmeasured.nodes) == set(groups[1][1].nodes)


# --------------------------------------------------------------------------- measured once more


def again_of(chosen, is_slow=lambda g: True):
    """The chosen groups measured once more: 11.0 where ``is_slow`` (every one unless given), else
    44.0; by their round."""
    return [GroupResult(n, g, 11.0 if is_slow(g) else 44.0) for n, rnd in chosen for g in rnd.groups]


def test_a_one_off_dip_of_one_group_between_two_leaves_is_measured_again_and_names_nothing():
    dipped = next(g for g in PLAN.stage("between leaves")[1].groups if set(g.leaves) == {"leaf1", "leaf3"})
    first = measured(PLAN, lambda g: g == dipped)
    assert [c.kind for c in judged(first).localisation.culprits] == ["link"]  # once: it would name the path
    chosen = remeasure(PLAN, first, LINE)
    assert [(n, rnd.stage, rnd.groups) for n, rnd in chosen] == [(3, "between leaves", (dipped,))]
    found = judge_rounds(
        PLAN,
        first,
        op="all_reduce",
        metric=METRIC,
        fail_below=LINE,
        parents=PARENTS,
        again=again_of(chosen, lambda g: False),
    )
    assert found.findings == () and not found.localisation.culprits
    record = found.to_json()
    index = [n for leaf in TREE.leaves for n in leaf.nodes].index
    assert record["again"] == [[3, "+".join(str(index(n)) for n in dipped.nodes) + "=44"]]
    assert set(verdicts_of(found).values()) == {"ACCEPTED"}


def test_a_slow_path_measured_slow_again_is_named_with_its_higher_busbw():
    first = measured(PLAN, lambda g: set(g.leaves) == {"leaf1", "leaf3"})
    chosen = remeasure(PLAN, first, LINE)
    ((number, rnd),) = chosen  # the leaf pair's 16 groups, without the other pair of their round
    assert number == 3 and len(rnd.groups) == 16 and {g.leaves for g in rnd.groups} == {("leaf1", "leaf3")}
    found = judge_rounds(
        PLAN, first, op="all_reduce", metric=METRIC, fail_below=LINE, parents=PARENTS, again=again_of(chosen)
    )
    (link,) = found.findings
    assert (link.scope, link.culprits, link.value) == ("link", ("leaf1", "leaf3"), 12.0)
    slower_again = judge_rounds(
        PLAN,
        first,
        op="all_reduce",
        metric=METRIC,
        fail_below=LINE,
        parents=PARENTS,
        again=[GroupResult(n, g, 8.0) for n, r in chosen for g in r.groups],
    )
    assert slower_again.findings[0].value == 12.0  # judged by the higher of its two measurements


def test_a_slow_leaf_is_measured_again_inside_it_alone_and_half_fast_again_names_nothing():
    first = measured(PLAN, lambda g: "leaf2" in g.leaves and len(g.leaves) == 1)
    ((number, rnd),) = remeasure(PLAN, first, LINE)
    assert number == 1 and rnd.stage == "inside leaves" and {g.leaves for g in rnd.groups} == {("leaf2",)}
    confirmed = judge_rounds(
        PLAN, first, op="all_reduce", metric=METRIC, fail_below=LINE, parents=PARENTS, again=again_of([(1, rnd)])
    )
    assert [(f.scope, f.culprits) for f in confirmed.findings] == [("switch", ("leaf2",))]
    some_fast = again_of([(1, rnd)], lambda g: g != rnd.groups[0])
    partly = judge_rounds(
        PLAN, first, op="all_reduce", metric=METRIC, fail_below=LINE, parents=PARENTS, again=some_fast
    )
    assert "switch" not in {f.scope for f in partly.findings}  # not every group inside it slow twice


def test_slow_uplinks_are_measured_again_in_each_round_that_showed_them():
    first = measured(PLAN, lambda g: "leaf4" in g.leaves and len(g.leaves) == 2)
    chosen = remeasure(PLAN, first, LINE)
    assert [n for n, _ in chosen] == [2, 3, 4]
    assert all(all("leaf4" in g.leaves for g in rnd.groups) for _, rnd in chosen)


def test_a_slow_node_and_fast_groups_measure_nothing_again():
    assert remeasure(PLAN, measured(PLAN, lambda g: "node23" in g.nodes), LINE) == ()
    assert remeasure(PLAN, measured(PLAN, lambda g: False), LINE) == ()
    assert remeasure(PLAN, measured(PLAN, lambda g: True), None) == ()


def test_a_group_measured_again_without_a_result_keeps_its_first():
    first = measured(PLAN, lambda g: set(g.leaves) == {"leaf1", "leaf3"})
    chosen = remeasure(PLAN, first, LINE)
    nothing = [GroupResult(n, g, None) for n, r in chosen for g in r.groups]
    found = judge_rounds(PLAN, first, op="all_reduce", metric=METRIC, fail_below=LINE, parents=PARENTS, again=nothing)
    assert [(f.scope, f.culprits) for f in found.findings] == [("link", ("leaf1", "leaf3"))]


# --------------------------------------------------------------------------- a node lost under a round


def test_a_node_lost_under_a_round_leaves_its_groups_not_measured_and_convicts_only_itself():
    """node23 (leaf2) is lost under round 3's job: that job's groups and node23's later ones have
    no result; its earlier groups were slow (it was failing), which must not name leaf2 or a path."""
    lost = {"node23": Lost(3, "DOWN+NOT_RESPONDING: Not responding")}

    def busbw(number, g):
        if number == 3 or (number > 3 and "node23" in g.nodes):
            return None
        return 12.0 if "node23" in g.nodes else 45.0

    results = [GroupResult(i, g, busbw(i, g)) for i, r in enumerate(PLAN.rounds, start=1) for g in r.groups]
    assert remeasure(PLAN, results, LINE, lost) == ()
    found = judge_rounds(PLAN, results, op="all_reduce", metric=METRIC, fail_below=LINE, parents=PARENTS, lost=lost)
    own, unmeasured = found.findings
    assert (own.scope, own.culprits, own.severity) == ("node", ("node23",), "fail")
    assert "node23 was lost under round 3's job (DOWN+NOT_RESPONDING: Not responding)" in own.text
    round3 = len(PLAN.rounds[2].groups)
    later = sum(
        1 for r in PLAN.rounds[3:-1] for g in r.groups if "node23" in g.nodes
    )  # the whole cluster ran without it
    assert f"{round3 + later} group(s) of the rounds were not measured" in own.text
    assert unmeasured.severity == "not_judged" and unmeasured.culprits == ("node23",)
    assert unmeasured.convicts == ()
    assert "not measured: node23 was lost under round 3's job" in unmeasured.text
    assert not [f for f in found.findings if f.scope in ("switch", "link")]
    assert not found.localisation.culprits
    verdicts = verdicts_of(found)
    assert [n for n, v in verdicts.items() if v == "REJECTED"] == ["node23"]


def test_a_node_lost_under_the_whole_cluster_round_convicts_only_itself_and_leaves_it_unmeasured():
    """node23 is lost under the last round's job (every node): that round has no result, its
    earlier groups (slow: it was failing) count for nothing, and no partner, leaf or path is named."""
    last = len(PLAN.rounds)
    lost = {"node23": Lost(last, "DOWN+NOT_RESPONDING: Not responding")}

    def busbw(number, g):
        if number == last:
            return None
        return 12.0 if "node23" in g.nodes else 45.0

    results = [GroupResult(i, g, busbw(i, g)) for i, r in enumerate(PLAN.rounds, start=1) for g in r.groups]
    assert remeasure(PLAN, results, LINE, lost) == ()
    found = judge_rounds(PLAN, results, op="all_reduce", metric=METRIC, fail_below=LINE, parents=PARENTS, lost=lost)
    own, unmeasured = found.findings
    assert (own.scope, own.culprits, own.severity) == ("node", ("node23",), "fail")
    assert own.text == (
        "all_reduce: node23 was lost under round 5's job (the whole cluster) (DOWN+NOT_RESPONDING: Not "
        "responding); 1 group(s) of the rounds were not measured for it, the whole-cluster all_reduce among them"
    )
    assert (unmeasured.severity, unmeasured.culprits, unmeasured.convicts) == ("not_judged", ("node23",), ())
    assert len(unmeasured.nodes) == len(NODES)
    assert not found.localisation.culprits and not found.localisation.whole_cluster_only
    verdicts = verdicts_of(found)
    assert [n for n, v in verdicts.items() if v == "REJECTED"] == ["node23"]


def test_a_node_lost_under_the_whole_cluster_round_leaves_what_the_earlier_rounds_named():
    last = len(PLAN.rounds)
    lost = {"node05": Lost(last, "DOWN")}  # of leaf1

    def busbw(number, g):
        if number == last:
            return None
        return 12.0 if set(g.leaves) == {"leaf2", "leaf4"} else 45.0

    results = [GroupResult(i, g, busbw(i, g)) for i, r in enumerate(PLAN.rounds, start=1) for g in r.groups]
    chosen = remeasure(PLAN, results, LINE, lost)
    again = again_of(chosen)
    found = judge_rounds(
        PLAN, results, op="all_reduce", metric=METRIC, fail_below=LINE, parents=PARENTS, again=again, lost=lost
    )
    assert [(f.scope, f.culprits) for f in found.findings if f.severity == "fail"] == [
        ("node", ("node05",)),
        ("link", ("leaf2", "leaf4")),
    ]


def test_a_node_lost_under_the_job_measuring_groups_again_names_no_path_and_only_itself():
    """The path leaf1–leaf3 is slow in its round; node05 (leaf1) is lost under the job that
    measures those groups again, which ends without results: the first measurement alone names
    nothing, node05 is named lost, and its partners are not rejected."""
    first = measured(PLAN, lambda g: set(g.leaves) == {"leaf1", "leaf3"})
    ((number, rnd),) = remeasure(PLAN, first, LINE)
    lost = {"node05": Lost(number, "DOWN+NOT_RESPONDING: Not responding", again=True)}
    broken = [GroupResult(number, g, None) for g in rnd.groups]
    found = judge_rounds(
        PLAN, first, op="all_reduce", metric=METRIC, fail_below=LINE, parents=PARENTS, again=broken, lost=lost
    )
    own, unmeasured = found.findings
    assert (own.scope, own.culprits, own.severity) == ("node", ("node05",), "fail")
    assert own.text == (
        f"all_reduce: node05 was lost under the job measuring round {number}'s slow groups again "
        f"(DOWN+NOT_RESPONDING: Not responding); {len(rnd.groups)} group(s) were not measured again for it; "
        "their first measurement alone names no switch or link"
    )
    assert (unmeasured.severity, unmeasured.culprits) == ("not_judged", ("node05",))
    assert set(unmeasured.nodes) == {n for g in rnd.groups for n in g.nodes}
    assert not [f for f in found.findings if f.scope in ("switch", "link")]
    verdicts = verdicts_of(found)
    assert [n for n, v in verdicts.items() if v == "REJECTED"] == ["node05"]


def test_a_job_measuring_again_that_a_loss_broke_leaves_the_other_jobs_judged():
    # Slow uplinks of leaf4 are measured again in three jobs (rounds 2–4); node60 (leaf4) is lost
    # under the first: the two others, slow again, still name the uplinks without node60's groups.
    # node59, node60's partner inside leaf4 (the one group where it was fast), is then slow in
    # every group left: not convicted for it, not judged.
    first = measured(PLAN, lambda g: "leaf4" in g.leaves and len(g.leaves) == 2)
    chosen = remeasure(PLAN, first, LINE)
    (n1, r1), *rest = chosen
    lost = {"node60": Lost(n1, "DOWN", again=True)}
    again = [GroupResult(n1, g, None) for g in r1.groups] + again_of(rest)
    found = judge_rounds(
        PLAN, first, op="all_reduce", metric=METRIC, fail_below=LINE, parents=PARENTS, again=again, lost=lost
    )
    named = [(f.scope, f.culprits) for f in found.findings if f.severity == "fail"]
    assert named == [("node", ("node60",)), ("link", ("leaf4", "spine"))]
    (partner,) = [f for f in found.findings if f.scope == "node" and f.severity == "not_judged"]
    assert partner.culprits == ("node59",) and partner.convicts == ()
    assert partner.text.endswith("not judged: its group(s) with node60, lost, do not count")
    verdicts = verdicts_of(found)
    assert [n for n, v in verdicts.items() if v == "REJECTED"] == ["node60"]


def test_a_collective_left_unmeasured_by_a_loss_has_no_verdict_series_or_wrong_result():
    check = unmeasured("all_reduce", NODES, METRIC, None)
    assert (check.measurement, check.verdict, check.problems, check.series) == (None, None, (), {})
    assert not check.fails

"""The across-node rounds over a switch tree (plan/rounds.py), their cost (plan/round_cost.py),
and what the rounds' results name (checks/localise.py)."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from pytest_gpucluster.checks.localise import localise
from pytest_gpucluster.config.topology import Topology, parse_topology, read_topology
from pytest_gpucluster.plan.round_cost import cost, dry_run_lines, lines
from pytest_gpucluster.plan.rounds import Group, RoundPlan, UnplacedNodes, batches, plan_rounds, tournament
from pytest_gpucluster.slurm import Slurm
from pytest_gpucluster.slurm.topology import topology_of_output, tree_source

DATA = Path(__file__).resolve().parents[1] / "data" / "topology"
TWO_LEVEL = "scontrol-22.05-show-topology-2level_representative_sample.txt"  # leaves of 16, 16, 11, 1
THREE_LEVEL = "topology-3level_representative_sample.conf"  # leaves of 8, 8, 7, 8, 4 in two pods


def tree(name: str) -> Topology:
    return read_topology(DATA / name)


def all_nodes(topology: Topology) -> list[str]:
    return [n for leaf in topology.leaves for n in leaf.nodes]


def synthetic(leaves: int, per_leaf: int, per_spine: int = 0) -> Topology:
    """Leaves of ``per_leaf`` nodes under one spine, or under spines of ``per_spine`` leaves and a core."""
    text = [f"SwitchName=leaf{i} Nodes=n{i}-[1-{per_leaf}]" for i in range(leaves)]
    if per_spine:
        spines = range(0, leaves, per_spine)
        text += [
            f"SwitchName=spine{s} Switches=" + ",".join(f"leaf{i}" for i in range(s, min(s + per_spine, leaves)))
            for s in spines
        ]
        text.append("SwitchName=core Switches=" + ",".join(f"spine{s}" for s in spines))
    else:
        text.append("SwitchName=spine Switches=" + ",".join(f"leaf{i}" for i in range(leaves)))
    return parse_topology("\n".join(text))


# --------------------------------------------------------------------------- the plan


@pytest.mark.parametrize("count", [2, 3, 4, 5, 8, 13, 64])
def test_the_tournament_meets_every_pair_once_and_nobody_twice_a_round(count):
    rounds = tournament(count)
    assert len(rounds) == (count - 1 if count % 2 == 0 else count)
    met = [pair for matches in rounds for pair in matches]
    assert sorted(met) == list(itertools.combinations(range(count), 2))
    for matches in rounds:
        players = [p for pair in matches for p in pair]
        assert len(players) == len(set(players))


def check_properties(plan: RoundPlan) -> None:
    """Every pair of leaves meets; no node in two groups of a round; no leaf in two leaf pairs of
    a round; every node is in the whole-cluster round."""
    leaves = [leaf.name for leaf in plan.leaves]
    met = {g.leaves for r in plan.stage("between leaves") for g in r.groups}
    assert met == set(itertools.combinations(leaves, 2))
    for rnd in plan.rounds:
        nodes = [n for g in rnd.groups for n in g.nodes]
        assert len(nodes) == len(set(nodes)), rnd.stage
        if rnd.stage == "between leaves":
            pairs = {g.leaves for g in rnd.groups}
            playing = [leaf for pair in pairs for leaf in pair]
            assert len(playing) == len(set(playing))
            # every node of a leaf that plays is measured across leaves in that round
            assert set(nodes) == {n for leaf in plan.leaves if leaf.name in playing for n in leaf.nodes}
    assert plan.stage("whole cluster")[0].groups[0].nodes == plan.nodes


def test_uneven_leaves_and_a_one_node_leaf():
    topology = tree(TWO_LEVEL)
    plan = plan_rounds(all_nodes(topology), topology)
    check_properties(plan)
    assert [r.stage for r in plan.rounds] == ["inside leaves", *["between leaves"] * 3, "whole cluster"]
    inside = plan.stage("inside leaves")[0].groups
    # 8 + 8 pairs in the leaves of 16; leaf3's 11 nodes: 4 pairs and a triple; leaf4 has nobody to pair with
    assert [len(g.nodes) for g in inside] == [2] * 16 + [2, 2, 2, 2, 3]
    assert not any(g.leaves == ("leaf4",) for g in inside)
    assert inside[-1].nodes == ("gpu-041", "gpu-042", "gpu-043")
    # the one-node leaf meets a leaf of 16 in one group of 17 nodes
    lone = [g for r in plan.stage("between leaves") for g in r.groups if g.leaves == ("leaf1", "leaf4")]
    assert len(lone) == 1
    assert lone[0].nodes[-1] == "gpu-044"
    assert len(lone[0].nodes) == 17
    # leaf2 (16) against leaf3 (11): 11 groups, five with a second node of leaf2
    l23 = [g for r in plan.stage("between leaves") for g in r.groups if g.leaves == ("leaf2", "leaf3")]
    assert sorted(len(g.nodes) for g in l23) == [2] * 6 + [3] * 5


def test_an_odd_node_joins_the_last_pair_of_its_leaf():
    topology = parse_topology("SwitchName=l1 Nodes=a[1-5]\nSwitchName=l2 Nodes=b[1-2]\nSwitchName=s Switches=l[1-2]")
    plan = plan_rounds(all_nodes(topology), topology)
    assert [g.nodes for g in plan.stage("inside leaves")[0].groups] == [
        ("a1", "a2"),
        ("a3", "a4", "a5"),
        ("b1", "b2"),
    ]
    between = plan.stage("between leaves")[0].groups
    assert [g.nodes for g in between] == [("a1", "a3", "a5", "b1"), ("a2", "a4", "b2")]


def test_three_levels_cover_every_pair_of_leaves_across_pods():
    topology = tree(THREE_LEVEL)
    plan = plan_rounds(all_nodes(topology), topology)
    check_properties(plan)
    assert plan.levels == 3
    assert len(plan.stage("between leaves")) == 5  # five leaves: each sits one round out


@pytest.mark.parametrize(("leaves", "per_leaf", "per_spine"), [(2, 1, 0), (7, 3, 0), (16, 4, 4), (9, 5, 3)])
def test_round_plan_properties_on_other_shapes(leaves, per_leaf, per_spine):
    topology = synthetic(leaves, per_leaf, per_spine)
    check_properties(plan_rounds(all_nodes(topology), topology))


def test_only_the_tested_nodes_are_planned_and_a_leaf_without_any_drops_out():
    topology = tree(TWO_LEVEL)
    tested = [n for n in all_nodes(topology) if n not in {f"gpu-{i:03d}" for i in range(17, 33)}]
    plan = plan_rounds(tested, topology)
    assert [leaf.name for leaf in plan.leaves] == ["leaf1", "leaf3", "leaf4"]
    check_properties(plan)


def test_a_tested_node_under_no_leaf_is_refused_naming_it():
    topology = tree(TWO_LEVEL)
    with pytest.raises(UnplacedNodes, match=r"1 tested node\(s\) under no leaf of the topology: gpu-999"):
        plan_rounds([*all_nodes(topology), "gpu-999"], topology)


def test_without_a_tree_the_plan_is_the_whole_cluster_and_pairing():
    plan = plan_rounds([f"n{i}" for i in range(9)], None)
    assert [r.stage for r in plan.rounds] == ["whole cluster"]
    assert "isolated by pairing: 4 neighbour pairs" in lines(plan, cost(plan))[0]


def test_the_1024_node_plan_costs_leaves_plus_one_jobs():
    topology = synthetic(64, 16)
    plan = plan_rounds(all_nodes(topology), topology)
    spent = cost(plan, ops=3, start_s=20, sweep_s=5)
    assert spent.jobs == 1 + 63 + 1
    assert spent.groups == 512 + 63 * 512 + 1
    assert spent.estimate_s == 65 * 35
    printed = lines(plan, spent)
    assert printed[0] == "fabric: 1024 nodes under 64 leaves of 16 nodes (2 levels of switches)"
    assert printed[2].startswith("  rounds 2–64, between leaves: 32 leaf pairs a round, 512 groups of 2 nodes")
    assert printed[-2] == (
        "  per leaf: 65 rounds (1 inside leaves, 63 between leaves, 1 whole cluster) for 64 leaves of 16 nodes: "
        "leaf[0-63]"
    )
    assert printed[-1] == "fabric: 65 jobs, 32769 groups, about 38 min (35 s per round assumed)"


# --------------------------------------------------------------------------- localisation

FAST, SLOW, FLOOR = 40.0, 12.0, 30.0


def results(plan: RoundPlan, is_slow) -> dict[Group, float]:
    return {g: SLOW if is_slow(g) else FAST for g in plan.groups}


def round_numbers(plan: RoundPlan, groups) -> tuple[int, ...]:
    return tuple(sorted({i for i, r in enumerate(plan.rounds, 1) for g in r.groups if g in groups}))


def test_a_bad_node_is_named_as_a_node_in_the_rounds_it_was_slow_in():
    topology = tree(TWO_LEVEL)
    plan = plan_rounds(all_nodes(topology), topology)
    found = localise(plan, results(plan, lambda g: "gpu-036" in g.nodes), FLOOR)
    assert [(c.kind, c.name) for c in found.culprits] == [("node", "gpu-036")]
    culprit = found.culprits[0]
    # its leaf pair in round 1, then a group against each of the three other leaves
    assert culprit.rounds == (1, 2, 3, 4)
    assert len(culprit.evidence) == 4
    assert found.unexplained == ()
    assert not found.whole_cluster_only
    assert culprit.sentence().startswith("node gpu-036: slow in all 4 of its groups (rounds 1, 2, 3, 4)")


def test_a_bad_node_in_a_one_node_leaf_is_named_as_the_node():
    topology = tree(TWO_LEVEL)
    plan = plan_rounds(all_nodes(topology), topology)
    found = localise(plan, results(plan, lambda g: "gpu-044" in g.nodes), FLOOR)
    assert [(c.kind, c.name) for c in found.culprits] == [("node", "gpu-044")]
    assert found.culprits[0].rounds == (2, 3, 4)  # no group inside its leaf


def test_a_bad_link_between_two_leaves_is_named_in_the_round_they_meet():
    topology = tree(THREE_LEVEL)
    plan = plan_rounds(all_nodes(topology), topology)
    found = localise(plan, results(plan, lambda g: g.leaves == ("leafa2", "leafb1")), FLOOR)
    assert [(c.kind, c.name) for c in found.culprits] == [("link", "leafa2–leafb1")]
    culprit = found.culprits[0]
    spanning = [g for r in plan.stage("between leaves") for g in r.groups if g.leaves == ("leafa2", "leafb1")]
    assert len(culprit.rounds) == 1
    assert culprit.rounds == round_numbers(plan, spanning)
    assert len(culprit.evidence) == 8
    assert "the path between leaves leafa2 and leafb1" in culprit.sentence()


def test_a_bad_leaf_is_named_as_the_leaf_not_as_its_nodes():
    topology = tree(TWO_LEVEL)
    plan = plan_rounds(all_nodes(topology), topology)
    leaf3 = set(plan.leaves[2].nodes)
    # a switch that slows everything through it: every group with one of its nodes
    found = localise(plan, results(plan, lambda g: bool(leaf3 & set(g.nodes))), FLOOR)
    assert [(c.kind, c.name) for c in found.culprits] == [("leaf", "leaf3")]
    # a fault inside the leaf only: its own groups slow, the groups across leaves fast
    found = localise(plan, results(plan, lambda g: g.leaves == ("leaf3",)), FLOOR)
    assert [(c.kind, c.name) for c in found.culprits] == [("leaf", "leaf3")]
    assert found.culprits[0].rounds == (1,)


def test_a_leafs_bad_uplinks_are_named_as_its_uplinks():
    topology = tree(THREE_LEVEL)
    plan = plan_rounds(all_nodes(topology), topology)
    found = localise(plan, results(plan, lambda g: len(g.leaves) == 2 and "leafb1" in g.leaves), FLOOR)
    assert [(c.kind, c.name) for c in found.culprits] == [("uplinks", "leafb1")]


def test_two_bad_nodes_in_one_leaf_are_two_nodes_not_the_leaf():
    topology = tree(TWO_LEVEL)
    plan = plan_rounds(all_nodes(topology), topology)
    bad = {"gpu-003", "gpu-010"}
    found = localise(plan, results(plan, lambda g: bool(bad & set(g.nodes))), FLOOR)
    assert sorted(c.name for c in found.culprits if c.kind == "node") == sorted(bad)
    assert found.named("leaf") == ()


def test_only_the_whole_cluster_slow_is_a_fault_that_needs_the_fabric_loaded():
    topology = tree(TWO_LEVEL)
    plan = plan_rounds(all_nodes(topology), topology)
    found = localise(plan, results(plan, lambda g: g.leaves == tuple(leaf.name for leaf in plan.leaves)), FLOOR)
    assert found.culprits == ()
    assert found.whole_cluster_only


def test_groups_without_a_result_are_unmeasured_not_slow():
    topology = tree(TWO_LEVEL)
    plan = plan_rounds(all_nodes(topology), topology)
    measured = {g: FAST for g in plan.stage("inside leaves")[0].groups}
    found = localise(plan, measured, FLOOR)
    assert found.culprits == ()
    assert len(found.unmeasured) == len(plan.groups) - len(measured)


def test_a_bad_node_of_1024_is_named():
    topology = synthetic(64, 16)
    plan = plan_rounds(all_nodes(topology), topology)
    found = localise(plan, results(plan, lambda g: "n37-5" in g.nodes), FLOOR)
    assert [(c.kind, c.name) for c in found.culprits] == [("node", "n37-5")]
    assert found.culprits[0].rounds == tuple(range(1, 65))


def test_the_dry_run_says_in_one_line_when_the_tree_misses_tested_nodes():
    topology = tree(TWO_LEVEL)
    assert dry_run_lines(["gpu-001", "gpu-999"], topology, ops=3) == [
        "fabric: cannot plan the rounds: 1 tested node(s) under no leaf of the topology: gpu-999; "
        "update the profile's topology_file from `scontrol show topology`"
    ]
    assert dry_run_lines(all_nodes(topology), topology, ops=3)[-1].startswith("fabric: 5 jobs, 63 groups")


def test_the_dry_run_of_fewer_than_two_nodes_plans_no_rounds():
    assert dry_run_lines([], tree(TWO_LEVEL), ops=3) == ["fabric: 0 tested node(s): no across-node rounds"]
    assert dry_run_lines(["gpu-001"], None, ops=3) == ["fabric: 1 tested node(s): no across-node rounds"]


def test_a_round_of_more_groups_than_a_job_holds_runs_as_several_keeping_leaf_pairs_whole():
    plan = plan_rounds(all_nodes(synthetic(8, 4)), synthetic(8, 4))  # 8 leaves of 4: 4 pairs of 4 groups a round
    between = plan.stage("between leaves")[0]
    jobs = batches(between, 8)
    assert [len(j.groups) for j in jobs] == [8, 8]
    assert all(len({g.leaves for g in j.groups}) == 2 for j in jobs)  # two whole leaf pairs each
    assert [g for j in jobs for g in j.groups] == list(between.groups)
    small = batches(between, 3)  # a leaf pair of 4 groups is split: 3 + 1, the 1 shares a job
    assert all(len(j.groups) <= 3 for j in small) and [g for j in small for g in j.groups] == list(between.groups)
    assert batches(between, None) == (between,) and batches(between, 16) == (between,)
    assert cost(plan, groups_at_once=8).jobs == 2 + 7 * 2 + 1  # inside: 16 pairs; between: 7 rounds of 16
    assert lines(plan, cost(plan, groups_at_once=8))[-1].endswith("(35 s per job assumed)")


def test_the_dry_run_of_slurms_recorded_tree_says_where_it_came_from_and_each_leafs_rounds():
    """`scontrol show topology` as Slurm 22.05 prints it: leaves of 16, 16, 11 and 1 node."""
    topology = topology_of_output((DATA / TWO_LEVEL).read_text())
    assert topology is not None
    where = "switch tree from `scontrol show topology` (the profile names no topology_file)"
    printed = dry_run_lines(all_nodes(topology), topology, ops=3, tree_from=where)
    assert printed[0] == f"fabric: {where}"
    assert printed[1] == "fabric: 44 nodes under 4 leaves of 1–16 nodes (2 levels of switches)"
    assert [line for line in printed if "per leaf" in line] == [
        "  per leaf: 5 rounds (1 inside leaves, 3 between leaves, 1 whole cluster) for 2 leaves of 16 nodes: leaf[1-2]",
        "  per leaf: 5 rounds (1 inside leaves, 3 between leaves, 1 whole cluster) for 1 leaf of 11 nodes: leaf3",
        "  per leaf: 4 rounds (3 between leaves, 1 whole cluster) for 1 leaf of 1 node: leaf4",
    ]
    assert printed[-1] == "fabric: 5 jobs, 63 groups, about 3 min (35 s per round assumed)"


def test_an_odd_number_of_leaves_sits_each_leaf_out_of_one_round_between_leaves():
    topology = synthetic(5, 2)
    plan = plan_rounds(all_nodes(topology), topology)
    assert len(plan.stage("between leaves")) == 5
    assert [line for line in lines(plan, cost(plan)) if "per leaf" in line] == [
        "  per leaf: 6 rounds (1 inside leaves, 4 between leaves, 1 whole cluster) for 5 leaves of 2 nodes: leaf[0-4]"
    ]


def test_the_profiles_tree_is_taken_before_slurm_is_asked():
    """A profile's topology_file wins, and the local executor has no Slurm to ask: neither asks."""
    topology = tree(TWO_LEVEL)
    found = tree_source(topology, on_slurm=True, client=Slurm())
    assert found.tree is topology and found.where == "switch tree from the profile's topology_file"
    local = tree_source(None, on_slurm=False, client=Slurm())
    assert local.tree is None
    assert (
        local.where == "no switch tree: the profile names no topology_file, and the local executor has no Slurm to ask"
    )
    assert dry_run_lines(all_nodes(topology), None, ops=3, tree_from=local.where)[:2] == [
        f"fabric: {local.where}",
        "fabric: no topology_file; one group of all 44 nodes, and a slow result is isolated by pairing: "
        "22 neighbour pairs, then each suspect with a cleared node (2 more jobs)",
    ]

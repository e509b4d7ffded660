"""Placement judgement: exact layouts pass; every deviation is named by rank and host."""

from __future__ import annotations

from pytest_gpucluster.checks.placement import placement_findings
from pytest_gpucluster.workloads.placement import Placement


def placement_problems(placements, nodes, tasks_per_node) -> list[str]:
    """The findings' sentences."""
    return [f.text for f in placement_findings(placements, nodes, tasks_per_node)]


def p(procid: int, host: str, nodeid: int, localid: int, ntasks: int = 2) -> Placement:
    return Placement(hostname=host, procid=procid, localid=localid, nodeid=nodeid, ntasks=ntasks, source="slurm")


def test_exact_layouts_pass():
    assert placement_problems([p(0, "a", 0, 0, 1)], 1, 1) == []
    assert placement_problems([p(0, "a", 0, 0), p(1, "a", 0, 1)], 1, 2) == []
    assert placement_problems([p(0, "a", 0, 0), p(1, "b", 1, 0)], 2, 1) == []


def test_two_nodes_on_one_host_is_caught():
    problems = placement_problems([p(0, "a", 0, 0), p(1, "a", 1, 0)], 2, 1)
    assert problems[0] == "distinct node ids share a host: {0: 'a', 1: 'a'}"
    assert problems[-1] == "layout seen: rank 0→a (node 0, local 0), rank 1→a (node 1, local 0)"


def test_duplicate_rank_and_wrong_local_ids():
    problems = placement_problems([p(0, "a", 0, 0), p(0, "a", 0, 0)], 1, 2)
    assert "ranks are [0, 0], expected 0..1 once each" in problems
    assert "local ids on a are [0, 0], expected 0..1" in problems


def test_missing_task_and_wrong_ntasks():
    problems = placement_problems([p(0, "a", 0, 0, ntasks=1)], 1, 2)
    assert problems[0] == "expected 2 tasks, got 1"
    assert "rank 0 on a was told ntasks=1, expected 2" in problems


def test_at_64_nodes_of_8_the_wrong_node_is_named_without_listing_every_rank():
    world = 64 * 8
    placements = [p(r, f"node{r // 8 + 1}", r // 8, r % 8, world) for r in range(world)]
    assert placement_problems(placements, 64, 8) == []
    # node17's last task landed on node18 as a ninth task there; every rank still says ntasks=512.
    moved = [q if q.procid != 135 else p(135, "node18", 17, 8, world) for q in placements]
    problems = placement_problems(moved, 64, 8)
    assert problems[:2] == [
        "node id 16 (node17) holds 7 tasks, expected 8",
        "node id 17 (node18) holds 9 tasks, expected 8",
    ]
    assert len(problems) == 3  # and the layout, the named nodes' tasks first
    assert problems[2].startswith("layout seen: rank 128→node17 (node 16, local 0), ")
    assert "rank 135→node18 (node 17, local 8), rank 136→node18 (node 17, local 0)" in problems[2]
    assert problems[2].endswith("… (496 more)")
    assert sum(len(x) for x in problems) < 2000


def test_at_scale_missing_repeated_and_wrongly_told_ranks_are_grouped():
    world = 4 * 8
    placements = [p(r, f"n{r // 8}", r // 8, r % 8, world if r < 24 else 8) for r in range(world)]
    placements[5] = p(6, "n0", 0, 5, world)  # rank 5 is missing, rank 6 twice
    problems = placement_problems(placements, 4, 8)
    assert problems[0] == "ranks are not 0..31 once each: missing 5; repeated 6"
    assert problems[1] == "8 ranks were told ntasks=8, expected 32 (ranks 24, 25, 26, 27, 28, 29, 30, 31)"


def test_findings_name_the_jobs_nodes_together_without_a_culprit():
    assert placement_findings([p(0, "a", 0, 0), p(1, "b", 1, 0)], 2, 1, on=["n1", "n2"]) == []
    found = placement_findings([p(0, "a", 0, 0), p(1, "a", 1, 0)], 2, 1, on=["n1", "n2", "n1"])
    assert [f.text for f in found] == placement_problems([p(0, "a", 0, 0), p(1, "a", 1, 0)], 2, 1)
    assert {(f.scope, f.nodes, f.culprits, f.severity) for f in found} == {("nodes", ("n1", "n2"), (), "fail")}

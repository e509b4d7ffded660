"""Placement judgement: exact layouts pass; every deviation is named by rank and host."""

from __future__ import annotations

from pytest_gpucluster.checks.placement import placement_problems
from pytest_gpucluster.workloads.placement import Placement


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

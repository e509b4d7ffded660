"""A check of one node against the others, on a run where that node is the only usable one (the
others left out for their own states): not applicable to that node, never not judged, so its
peers' faults do not leave it unjudged (``plan.selection.alone``)."""

from __future__ import annotations

from dataclasses import replace

from pytest_gpucluster.plan.selection import Needs, Shape, alone, cannot_run

SHAPE = Shape(
    profile="testbox-2x1",
    executor="slurm",
    nodes=2,
    usable_nodes=1,
    gpus_per_node=1,
    gpus_declared=True,
    gpus_are_real=True,
    ib_hcas=0,
    accounting=False,
    unusable="node2: offering 0 GPU(s) (Gres=none), fewer than the 1 the profile expects",
)
ACROSS = Needs("t.py::test_node_matches_the_others", across_nodes=True)


def test_the_only_usable_node_has_no_other_to_be_judged_with():
    assert cannot_run(ACROSS, SHAPE)  # the check as a whole cannot run: across nodes, not judged
    assert alone(ACROSS, SHAPE, "node1") == (
        "node1 has no other node to be judged with (node2: offering 0 GPU(s) (Gres=none), fewer than the 1 the "
        "profile expects)"
    )


def test_only_a_per_node_check_across_nodes_with_one_usable_node_of_several():
    assert alone(ACROSS, SHAPE, None) is None  # a check over the nodes together: not judged, as before
    assert alone(replace(ACROSS, across_nodes=False), SHAPE, "node1") is None
    assert alone(ACROSS, replace(SHAPE, usable_nodes=2), "node1") is None
    assert alone(ACROSS, replace(SHAPE, usable_nodes=0), "node1") is None
    assert alone(ACROSS, replace(SHAPE, nodes=1), "node1") is None  # the profile's own n/a says it
    assert alone(ACROSS, replace(SHAPE, executor="local"), "node1") is None

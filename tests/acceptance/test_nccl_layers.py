"""The fabric layer by layer, so that a slow NVLink, NIC or cable is named by itself: all_reduce
kept to NVLink alone inside every node, kept to the network alone (every GPU through its NIC)
inside every node and across all nodes, and neighbour node pairs exchanging at once, where a node
slow with both its partners is named (docs/nccl.md, "Layer by layer")."""

from __future__ import annotations

import pytest

from pytest_gpucluster.checks import nics, straggler
from pytest_gpucluster.checks.lines import missing_line
from pytest_gpucluster.plan import facts, jobs

GUIDE = "docs/nccl.md, Layer by layer, says what to expect"


def gpucluster_not_applicable(cluster, name):
    """At collection: a node of one GPU has no NVLink peer and no GPU to reach through a NIC of
    its node; GPUs without InfiniBand or RoCE NICs have no NIC layer."""
    why = None
    if name in ("test_busbw_on_nvlink_alone", "test_busbw_through_the_nics_alone"):
        why = facts.no_intra_node_collective(cluster.gpus_per_node)
    if "through_the_nics" in name:
        why = why or facts.no_nic_layer(cluster.profile)
    return why


def judged(judge, check, thresholds, nodes, what, named=()):
    """The layer's verdict; without a line for the shape, its figure kept and a warning to set
    the line: the layers say where a slowness is, the plain sweeps decide the speed. ``named``:
    the NICs behind a slow figure, a node without its RDMA devices (``checks.nics``)."""
    judge.findings(check.problems, what)
    if check.verdict is None and check.measurement is not None:
        missing = missing_line(thresholds, check.metric, nodes, GUIDE)
        judge.attributed((), [check.measurement], [*named, missing], what)
    else:
        judge.verdict(check.verdict, check.measurement, check.metric, named=named)


@pytest.mark.uses(jobs.NCCL_NVLINK_ONLY)
def test_busbw_on_nvlink_alone(measured, judge, record, thresholds, node):
    check = measured()
    record("series", **check.series)
    judged(judge, check, thresholds, [node], f"{node}: all_reduce on NVLink alone")


@pytest.mark.uses(jobs.NCCL_NETWORK_ONLY)
def test_busbw_through_the_nics_alone(measured, judge, record, thresholds, cluster, node):
    check = measured()
    record("series", **check.series)
    named = nics.of_check(check, cluster.profile, "the NICs alone")
    judged(judge, check, thresholds, [node], f"{node}: all_reduce through the NICs alone", named)


@pytest.mark.across_nodes
@pytest.mark.uses(jobs.NCCL_NETWORK_ONLY)
def test_busbw_through_the_nics_alone_across_nodes(measured, judge, record, thresholds, cluster):
    check = measured()
    record("series", **check.series)
    named = nics.of_check(check, cluster.profile, "the NICs alone across nodes")
    judged(judge, check, thresholds, list(cluster.nodes), "all_reduce through the NICs alone across nodes", named)


@pytest.mark.across_nodes
@pytest.mark.uses(jobs.NEIGHBOUR_PAIRS)
def test_no_straggler_among_neighbour_pairs(measured, judge, record, thresholds):
    pairs = measured()  # every node with its ring neighbours, each round's pairs at once
    judged = straggler.judge_pairs(pairs.results, straggler.lines(thresholds), job_id=pairs.job_id)
    record("pairs", rounds=[["+".join(p) for p in r] for r in pairs.rounds], slow_nodes=list(judged.slow_nodes))
    named = nics.convicted(judged.slow_nodes, [g for p in pairs.results for g in p.nics], job_id=pairs.job_id)
    found = (*straggler.with_missing(judged, thresholds), *named)
    judge.attributed(judged.verdicts, judged.unjudged, found, "a node pair is slow")

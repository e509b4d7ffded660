"""The fabric layer by layer, so that a slow NVLink, NIC or cable is named by itself: all_reduce
kept to NVLink alone inside every node, kept to the network alone (every GPU through its NIC)
inside every node and across all nodes, and neighbour node pairs exchanging at once, where a node
slow with both its partners is named (docs/nccl.md, "Layer by layer")."""

from __future__ import annotations

import pytest

from pytest_gpucluster.checks import straggler
from pytest_gpucluster.plan import facts, jobs


def gpucluster_not_applicable(cluster, name):
    """At collection: a node of one GPU has no NVLink peer and no GPU to reach through a NIC of
    its node; GPUs without InfiniBand or RoCE NICs have no NIC layer."""
    why = None
    if name in ("test_busbw_on_nvlink_alone", "test_busbw_through_the_nics_alone"):
        why = facts.no_intra_node_collective(cluster.gpus_per_node)
    if "through_the_nics" in name:
        why = why or facts.no_nic_layer(cluster.profile)
    return why


@pytest.mark.uses(jobs.NCCL_NVLINK_ONLY)
def test_busbw_on_nvlink_alone(measured, judge, record, node):
    check = measured()
    record("series", **check.series)
    judge.findings(check.problems, f"{node}: all_reduce on NVLink alone returned wrong results")
    judge.verdict(check.verdict, check.measurement, check.metric)  # no line for the shape: not judged


@pytest.mark.uses(jobs.NCCL_NETWORK_ONLY)
def test_busbw_through_the_nics_alone(measured, judge, record, node):
    check = measured()
    record("series", **check.series)
    judge.findings(check.problems, f"{node}: all_reduce through the NICs alone returned wrong results")
    judge.verdict(check.verdict, check.measurement, check.metric)


@pytest.mark.across_nodes
@pytest.mark.uses(jobs.NCCL_NETWORK_ONLY)
def test_busbw_through_the_nics_alone_across_nodes(measured, judge, record):
    check = measured()
    record("series", **check.series)
    judge.findings(check.problems, "all_reduce through the NICs alone across nodes returned wrong results")
    judge.verdict(check.verdict, check.measurement, check.metric)


@pytest.mark.across_nodes
@pytest.mark.uses(jobs.NEIGHBOUR_PAIRS)
def test_no_straggler_among_neighbour_pairs(measured, judge, record, thresholds):
    pairs = measured()  # every node with its ring neighbours, each round's pairs at once
    judged = straggler.judge_pairs(pairs.results, straggler.lines(thresholds), job_id=pairs.job_id)
    record("pairs", rounds=[["+".join(p) for p in r] for r in pairs.rounds], slow_nodes=list(judged.slow_nodes))
    judge.attributed(
        judged.verdicts, judged.unjudged, straggler.with_missing(judged, thresholds), "a node pair is slow"
    )

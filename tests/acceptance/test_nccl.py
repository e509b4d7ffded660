"""Collective bus bandwidth, measured and checked the way nccl-tests does it:
inside every node at once (one test per node and collective, so a slow node is named), and
across all nodes with NCCL_ALGO=Ring, alltoall among the collectives; a miss across nodes is
narrowed down to the bad node."""

from __future__ import annotations

import pytest

from pytest_gpucluster.config.profile import across_nodes
from pytest_gpucluster.plan import facts, jobs
from pytest_gpucluster.plugin import SESSION_KEY


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """One test per collective the profile sweeps: ``[profiles.X.nccl] ops`` inside a node,
    ``[profiles.X.nccl_across] ops`` (those and alltoall unless set) across nodes."""
    if "op" in metafunc.fixturenames:
        profile = metafunc.config.stash[SESSION_KEY].profile
        across = metafunc.function.__name__ == "test_busbw_across_nodes"
        ops = list(across_nodes(profile).ops if across else profile.nccl.ops)
        metafunc.parametrize("op", ops, ids=ops)


def gpucluster_not_applicable(cluster, name):
    """At collection: a node of one GPU has no intra-node collective to measure."""
    return facts.no_intra_node_collective(cluster.gpus_per_node) if name == "test_busbw_inside_node" else None


@pytest.mark.uses(jobs.NCCL_INTRA)
def test_busbw_inside_node(measured, judge, record, node, op):
    check = measured()  # judged once; a miss is re-measured on this node alone
    record("series", **check.series)
    judge.findings(check.problems, f"{node}: {op} returned wrong results (never retried)")
    judge.verdict(check.verdict, check.measurement, check.metric)  # no bound: kept unjudged, not judged


@pytest.mark.across_nodes
@pytest.mark.uses(jobs.NCCL_INTER)
def test_busbw_across_nodes(measured, judge, record, op):
    check = measured()  # judged once; by rounds over the switch tree where known, else re-measured and paired
    if check.series:  # none where a node lost under the whole-cluster round left it unmeasured
        record("series", **check.series)
    if check.rounds is not None:
        record("rounds", **check.rounds.to_json())  # every group's busbw, for the report
    judge.findings(check.problems, f"{op} across nodes returned wrong results (never retried)")
    named = check.rounds.findings if check.rounds is not None else ()  # a node, a switch or a link
    judge.verdict(check.verdict, check.measurement, check.metric, named=named)  # no bound: kept unjudged

"""Telemetry under load: while the intra-node NCCL sweeps run
on every GPU of every node, no GPU idles while its peers work and no GPU slows down for heat or
power faults. The sampler rides along the collective job itself (``run/areas/nccl.py``), so
watching costs no extra load and no extra time.
"""

from __future__ import annotations

import pytest

from pytest_gpucluster.checks import telemetry
from pytest_gpucluster.plan import facts, jobs

pytestmark = pytest.mark.uses(jobs.NCCL_INTRA)


def gpucluster_not_applicable(cluster, name):
    """At collection: the load sampled here is the intra-node collective, which a node of one GPU
    does not have; the training job's telemetry is judged there instead (test_training.py)."""
    why = facts.no_intra_node_collective(cluster.gpus_per_node)
    if why is None:
        return None
    return f"{why}, the load these checks sample; the training job's telemetry is judged in test_training"


@pytest.fixture
def node_telemetry(measured, record, node):
    """node → NodeTelemetry of the run's intra-node collective job. Each node's series are
    recorded once, by the first of its tests that runs (not by every test, for every node)."""
    found = {t.node: t for t in measured().telemetry}
    if node in found:
        for s in telemetry.series_records([found[node]]):
            record("series", once=(s["name"], s["where"]), **s)
    return found


def _of(found, node):
    if node not in found:
        pytest.fail(f"no telemetry came back from {node} (nodes that answered: {', '.join(found)})", pytrace=False)
    return found[node]


@pytest.mark.quick
def test_node_was_sampled(node_telemetry, judge, node):
    judge.findings(telemetry.sampling_findings(_of(node_telemetry, node)), f"{node}: the telemetry sampler did not run")


def _gpus_sampled(found, node, judge):
    """The node's telemetry; the check fails naming the node and the sampler's error when its GPU
    series are empty (these checks run only where the GPUs are devices)."""
    nt = _of(found, node)
    judge.findings(telemetry.empty_gpu_series_findings([nt]), f"{node}: no GPU telemetry to judge")
    return nt


@pytest.mark.gpu
def test_no_gpu_idles_while_its_peers_work(node_telemetry, judge, node):
    _gpus_sampled(node_telemetry, node, judge)
    fractions = telemetry.idle_fractions(telemetry.absolute_util(list(node_telemetry.values())))
    mine = {gpu: f for gpu, f in sorted(fractions.items()) if gpu[0] == node}
    judge.findings(telemetry.unjudged_idle(mine), f"{node}: GPU idleness not measured under the collective load")
    judge.all([f.measurement() for f in mine.values()])


@pytest.mark.gpu
def test_no_gpu_throttles_for_heat_or_power_faults(node_telemetry, judge, node):
    found = telemetry.throttle_findings([_gpus_sampled(node_telemetry, node, judge)])
    judge.findings(found, f"{node}: GPU clocks slowed down for a reason that needs attention")

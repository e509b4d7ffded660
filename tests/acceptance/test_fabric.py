"""Fabric error counters across the run: every InfiniBand port's, NVLink's and GPU PCIe link's
error counters are read on every node before the first workload and again after every other job of the run
(workloads/fabric_counters.py), and what rose is judged by counter family and rate against the
profile's fabric rules (config/fabric_rules.py): a link that corrupts or drops traffic under load
shows here while the collectives still pass.

The before snapshot is the light job holding GPUs that starts ahead; the after snapshot is taken
by the check itself, whose tests the plugin runs last (``runs_last``). Both hold every GPU of
their nodes, so NVML sees them under device cgroups too. Where the profile's GPUs are real and
NVLink could not be read, the check is incomplete, not passed.
"""

from __future__ import annotations

import pytest

from pytest_gpucluster.checks import fabric_node
from pytest_gpucluster.outcomes import not_applicable
from pytest_gpucluster.plan import jobs


def gpucluster_not_applicable(cluster, name):
    """On an xdist worker the after snapshot cannot follow every other job: each worker runs only
    the tests it is handed, and nothing starts ahead there."""
    if cluster.is_xdist_worker:
        return (
            "under xdist a worker cannot take the after snapshot last in the run (other workers' jobs may "
            "still run) nor the before snapshot ahead of them; run without -n to compare fabric counters"
        )
    return None


def _nothing_to_read(snap, real_gpus):
    """Why a node's snapshot holds no fabric counter at all, or None. NVLink left unread on real
    GPUs is not "nothing": the check cannot judge it (incomplete)."""
    if snap.ib_ports or snap.error or snap.aer or any(g.links or g.pcie for g in snap.gpus):
        return None
    if real_gpus and (not snap.nvml_status.startswith("ok") or not snap.gpus):
        return None
    if not snap.nvml_status.startswith("ok"):
        nvlink = f"NVLink not read ({snap.nvml_status.removeprefix('unsupported: ')})"
    else:
        nvlink = "no NVLink or PCIe replay counter on its GPUs" if snap.gpus else "NVML sees no GPU"
    return f"no InfiniBand port under {snap.root} and {nvlink}"


@pytest.mark.uses(jobs.FABRIC_AFTER)
@pytest.mark.uses(jobs.FABRIC_BEFORE)
def test_fabric_error_counters_did_not_rise(cluster, measured, judge, record, node):
    if not cluster.plan.starts_ahead(jobs.FABRIC_BEFORE.key):
        not_applicable("the before snapshot was not taken ahead of the run's first workload")
    before, job_before = measured(jobs.FABRIC_BEFORE)
    if node not in before:
        pytest.fail(f"{node}: no fabric counters read before the run (job {job_before})", pytrace=False)
    real = cluster.profile.gpus_are_real and cluster.gpus_per_node > 0
    why = _nothing_to_read(before[node], real)
    if why:
        not_applicable(f"{node}: {why}: no fabric error counters to compare")
    after, job_after = measured(jobs.FABRIC_AFTER)
    found = fabric_node.judge_node(
        node,
        before[node],
        after.get(node),
        rules=cluster.profile.fabric,
        nvlink_required=real,
        job_ids=[job_before, job_after],
    )
    act_on(found, cluster, judge, record)


def act_on(found, cluster, judge, record):
    """What a node's judged pair of snapshots makes of the test: recorded, its notes said, then
    ended by its findings: failed, not judged (NVLink unread on real GPUs), or passed with its
    warnings (tests/plugin/test_fabric_verdict.py runs this on recorded pairs)."""
    record("fabric", **found.record)
    for line in found.notes:
        cluster.say(line)
    judge.findings(found.judged, found.what)

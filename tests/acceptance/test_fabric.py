"""Fabric error counters across the run: every InfiniBand port's and NVLink's error counters are
read on every node before the first workload and again after every other job of the run
(workloads/fabric_counters.py), and what rose is judged by counter family and rate against the
profile's fabric rules (checks/fabric_rules.py): a link that corrupts or drops traffic under load
shows here while the collectives still pass.

The before snapshot is the light job holding GPUs that starts ahead; the after snapshot is taken
by the check itself, whose tests the plugin runs last (``runs_last``). Both hold every GPU of
their nodes, so NVML sees them under device cgroups too. Where the profile's GPUs are real and
NVLink could not be read, the check is incomplete, not passed.
"""

from __future__ import annotations

import pytest

from pytest_gpucluster import fabric_checks
from pytest_gpucluster.outcomes import not_applicable
from pytest_gpucluster.plan import jobs
from pytest_gpucluster.workloads import fabric_counters


def _real_gpus(gpucluster):
    """Whether the nodes' GPUs are real, so the snapshots read NVLink through NVML."""
    return gpucluster.profile.gpus_are_real and gpucluster.gpus_per_node > 0


def _snapshot(gpucluster, key):
    """node → FabricSnapshot, and the job id: one task per node, holding the node's GPUs."""
    spec = gpucluster.spec(key, all_nodes=True)
    results = gpucluster.run(
        fabric_counters.snapshot, spec, root=gpucluster.profile.fabric_sysfs_root, nvml=_real_gpus(gpucluster)
    )
    return {r.value.node: r.value for r in results}, results[0].job_id


def _before(gpucluster):
    return gpucluster.once(jobs.FABRIC_BEFORE.key, lambda: _snapshot(gpucluster, jobs.FABRIC_BEFORE.key), light=True)


def _after(gpucluster):
    # Not light: it waits until every job started ahead has ended.
    return gpucluster.once(jobs.FABRIC_AFTER.key, lambda: _snapshot(gpucluster, jobs.FABRIC_AFTER.key))


def gpucluster_not_applicable(gpucluster, name):
    """On an xdist worker the after snapshot cannot follow every other job: each worker runs only
    the tests it is handed, and nothing starts ahead there."""
    if gpucluster.settings.is_xdist_worker:
        return (
            "under xdist a worker cannot take the after snapshot last in the run (other workers' jobs may "
            "still run) nor the before snapshot ahead of them; run without -n to compare fabric counters"
        )
    return None


def _nothing_to_read(snap, real_gpus):
    """Why a node's snapshot holds no fabric counter at all, or None. NVLink left unread on real
    GPUs is not "nothing": the check cannot judge it (incomplete)."""
    if snap.ib_ports or snap.error or any(g.links for g in snap.gpus):
        return None
    if real_gpus and (not snap.nvml_status.startswith("ok") or not snap.gpus):
        return None
    if not snap.nvml_status.startswith("ok"):
        nvlink = f"NVLink not read ({snap.nvml_status.removeprefix('unsupported: ')})"
    else:
        nvlink = "no NVLink on its GPUs" if snap.gpus else "NVML sees no GPU"
    return f"no InfiniBand port under {snap.root} and {nvlink}"


@pytest.mark.uses(jobs.FABRIC_AFTER)
@pytest.mark.uses(jobs.FABRIC_BEFORE, start=_before)
def test_fabric_error_counters_did_not_rise(gpucluster, judge, record, node):
    if not gpucluster.plan.starts_ahead(jobs.FABRIC_BEFORE.key):
        not_applicable("the before snapshot was not taken ahead of the run's first workload")
    before, job_before = _before(gpucluster)
    if node not in before:
        pytest.fail(f"{node}: no fabric counters read before the run (job {job_before})", pytrace=False)
    real = _real_gpus(gpucluster)
    why = _nothing_to_read(before[node], real)
    if why:
        not_applicable(f"{node}: {why}: no fabric error counters to compare")
    after, job_after = _after(gpucluster)
    fabric_checks.judge_node(
        judge,
        record,
        node,
        before[node],
        after.get(node),
        rules=gpucluster.profile.fabric,
        nvlink_required=real,
        job_ids=[job_before, job_after],
        say=gpucluster.say,
    )

"""Fabric error counters across the run: every InfiniBand port's and NVLink's error counters are
read on every node before the first workload and again after every other job of the run
(workloads/fabric_counters.py), and a counter that rose more than the profile's
``fabric_bounds`` allow fails the node (checks/fabric.py): a link that corrupts or drops traffic
under load shows here while the collectives still pass.

The before snapshot is a light job that starts ahead with the run's first jobs; the after
snapshot is taken by the check itself, whose tests the plugin runs last (``runs_last``). Both
are jobs without GPUs: NVLink counters are read where such a job sees the GPUs (the local
executor, or a cluster without device cgroups), and said not checked elsewhere.
"""

from __future__ import annotations

import warnings

import pytest

from pytest_gpucluster.checks import fabric
from pytest_gpucluster.outcomes import ThresholdWarning, not_applicable
from pytest_gpucluster.plan import jobs
from pytest_gpucluster.workloads import fabric_counters


def _nvml(gpucluster):
    """Whether a job without GPUs sees the node's GPUs through NVML."""
    p = gpucluster.profile
    return p.gpus_are_real and (p.executor == "local" or not p.device_cgroups)


def _snapshot(gpucluster, key):
    """node → FabricSnapshot, and the job id: one task per node, no GPU."""
    spec = gpucluster.spec(key, all_nodes=True, gpus_per_node=0)
    results = gpucluster.run(
        fabric_counters.snapshot, spec, root=gpucluster.profile.fabric_sysfs_root, nvml=_nvml(gpucluster)
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


def _nothing_to_read(snap):
    """Why a node's snapshot holds no fabric counter at all, or None."""
    if snap.ib_ports or snap.error or any(g.links for g in snap.gpus):
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
    why = _nothing_to_read(before[node])
    if why:
        not_applicable(f"{node}: {why}: no fabric error counters to compare")
    after, job_after = _after(gpucluster)
    jobs_ = f"jobs {job_before} → {job_after}"
    found = fabric.compare_nodes(
        [before[node]], [after[node]] if node in after else [], gpucluster.profile.fabric_bounds
    )
    record(
        "fabric",
        node=node,
        jobs=[job_before, job_after],
        ports=len(before[node].ib_ports),
        findings=[{"kind": f.kind, "where": f.where, "counter": f.counter, "text": f.sentence} for f in found],
    )
    for line in fabric.warnings(found):
        warnings.warn(ThresholdWarning(line), stacklevel=1)
    judge.problems(fabric.problems(found), f"{jobs_}: fabric error counters rose on {node}")

"""How long each GPU ran slowed for heat or power over the whole run: NVML's cumulative
clock-event counters, read in the fabric check's two snapshots (before the first workload, and
after every other job), give every nanosecond a GPU spent in HW thermal slowdown, HW power
brake or SW thermal slowdown between them, where sampling during one job sees only instants
(checks/gpu_slowdown.py, docs/inventory-telemetry.md).
"""

from __future__ import annotations

import pytest

from pytest_gpucluster.checks import gpu_slowdown
from pytest_gpucluster.outcomes import not_applicable
from pytest_gpucluster.plan import jobs


def gpucluster_not_applicable(cluster, name):
    """The span is the whole run only where the snapshots come first and last: not on an xdist
    worker."""
    if cluster.is_xdist_worker:
        return (
            "under xdist a worker cannot take the after snapshot last in the run (other workers' jobs may "
            "still run) nor the before snapshot ahead of them; run without -n to count GPU slowdown time"
        )
    return None


@pytest.mark.gpu
@pytest.mark.uses(jobs.FABRIC_AFTER)
@pytest.mark.uses(jobs.FABRIC_BEFORE)
def test_no_gpu_slowed_by_heat_or_power_over_the_run(cluster, measured, thresholds, judge, node):
    if not cluster.plan.starts_ahead(jobs.FABRIC_BEFORE.key):
        not_applicable("the before snapshot was not taken ahead of the run's first workload")
    before, job_before = measured(jobs.FABRIC_BEFORE)
    if node not in before:
        pytest.fail(f"{node}: no clock-event counters read before the run (job {job_before})", pytrace=False)
    why = gpu_slowdown.nothing_to_read(before[node])
    if why:
        not_applicable(f"{node}: {why}")
    after, job_after = measured(jobs.FABRIC_AFTER)
    found = gpu_slowdown.judge_node(node, before[node], after.get(node), thresholds, job_id=job_after)
    judge.attributed(found.verdicts, found.unjudged, found.findings, f"{node}: a GPU ran slowed for heat or power")

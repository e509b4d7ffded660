"""Xid errors on every node, during the run and since boot. Every task of the run given GPUs
watches NVML's Xid events while its workload runs (launch/node.py); after every other job, one
GPU-less task per node reads the node's kernel log where it may (workloads/xid.py). An Xid during
the run that asks for a GPU reset, a node reboot or servicing fails the node, naming
``node:gpuN``; any other, and any logged before the run, warns (checks/xid.py has the table).
Where neither source could be read on a node, its Xids are not judged: the check is skipped with
the reason, never passed.
"""

from __future__ import annotations

import pytest

from pytest_gpucluster.checks import xid
from pytest_gpucluster.errors import GpuClusterError
from pytest_gpucluster.plan import jobs

pytestmark = pytest.mark.gpu


def gpucluster_not_applicable(cluster, name):
    """On an xdist worker the check sees only that worker's jobs, and its kernel-log read cannot
    follow every other job of the run."""
    if cluster.is_xdist_worker:
        return (
            "under xdist a worker sees only its own jobs' Xid watches and cannot read the kernel log after "
            "every other job; run without -n to judge Xids"
        )
    return None


@pytest.mark.uses(jobs.XID_LOG)
def test_no_gpu_xid_errors(cluster, measured, judge, record, node):
    watches = [w for w in cluster.xid_watches if w.node == node]
    try:
        logs, job = measured()
        missing = f"job {job} has no reading from {node}"
    except GpuClusterError as exc:
        logs, job, missing = {}, None, f"the kernel-log job failed: {exc}"
    found = xid.judge_node(
        node,
        watches,
        logs.get(node),
        cluster.started_epoch,
        log_missing=missing,
        expected_gpus=cluster.gpus_per_node,
    )
    record(
        "xid",
        node=node,
        job=job,
        sources=found.sources,
        findings=[{"xid": f.xid, "gpus": list(f.gpus), "during": f.during, "text": f.sentence} for f in found.xids],
    )
    judge.findings(found.found, f"Xid errors on {node} during the run")  # or not judged: no source read

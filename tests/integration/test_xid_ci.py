"""The Xid check through Slurm on node3/node4, with a profile that takes their GRES GPUs for real:
every task of a GPU job comes back with its Xid watch, named by its node (NVML is not installed
there, and the watch says so); the check's kernel-log job runs after it on both nodes, and each
node is judged from its kernel log where the job may read it, or skipped saying why, never
passed without a source."""

from __future__ import annotations

import os
import shutil
import uuid
from pathlib import Path

import pytest
from faults_support import REPO, SHARED, fault_profile, run_pytest

pytestmark = pytest.mark.integration

GPU_JOB = """
from pytest_gpucluster.workloads.sleep import sleep


def test_gpu_job_reports_its_watches(gpucluster):
    spec = gpucluster.spec("gpu-job", all_nodes=True, tasks_per_node=2)
    results = gpucluster.run(sleep, spec, seconds=0.5)
    watches = gpucluster.launcher.xid_watches
    ranks = sorted((w.node, w.rank) for w in watches.values())
    assert ranks == [("node3", 0), ("node3", 1), ("node4", 2), ("node4", 3)]
    assert all(w.error.startswith("NVML unavailable: ") and w.job_id == results[0].job_id for w in watches.values())
"""


def test_xid_check_reads_both_sources_through_slurm(slurm_cluster, tmp_path):
    profile = fault_profile(tmp_path, gpus_are_real=True, queue_timeout_s=30)
    gpu_job = tmp_path / "test_gpu_job.py"
    gpu_job.write_text(GPU_JOB)
    try:
        run = run_pytest(profile, tmp_path, "tests/acceptance/test_xid.py", str(gpu_job), timeout=300)
    finally:
        profile.cancel_all()
    tests = run.results["tests"]
    names = [t["name"] for t in tests]
    assert names == ["test_gpu_job_reports_its_watches"] + ["test_no_gpu_xid_errors"] * 2, run.output[-3000:]
    assert tests[0]["verdict"] == "pass", tests[0]
    for t in tests[1:]:
        assert [j["name"].split("-", 1)[1] for j in t["jobs"]] == ["xid-kernel-log"], t
        if os.geteuid() == 0:  # the job runs as its submitter: root reads /dev/kmsg whatever dmesg_restrict says
            assert t["verdict"] == "pass", t
        else:
            assert t["verdict"] == "not_judged" and "kernel log not readable (/dev/kmsg: " in t["message"], t


def test_where_the_fabric_snapshot_runs_last_the_kernel_log_is_read_in_its_job(slurm_cluster, tmp_path):
    # The fabric check reads a recorded InfiniBand tree on the shared filesystem (no counter
    # moves); its after snapshot and the kernel log are read in one task per node.
    root = Path(SHARED) / f"xid-fabric-{uuid.uuid4().hex[:8]}"
    shutil.copytree(REPO / "tests" / "data" / "fabric" / "before", root)
    profile = fault_profile(tmp_path, gpus_are_real=True, fabric_sysfs_root=str(root), queue_timeout_s=30)
    try:
        run = run_pytest(profile, tmp_path, "tests/acceptance/test_fabric.py", "tests/acceptance/test_xid.py")
    finally:
        profile.cancel_all()
        shutil.rmtree(root, ignore_errors=True)
    plan = {j["key"]: j["rides_in"] for j in run.results["plan"]["jobs"]}
    assert plan["xid-kernel-log"] == "fabric-after", plan
    xid = [t for t in run.results["tests"] if t["name"] == "test_no_gpu_xid_errors"]
    fabric = [t for t in run.results["tests"] if "fabric_error_counters" in t["nodeid"]]
    assert sorted(t["params"] for t in xid) == sorted(t["params"] for t in fabric) == ["node3", "node4"]
    after = {j["job_id"] for t in fabric for j in t["jobs"] if j["name"].endswith("-fabric-after")}
    assert len(after) == 1, fabric
    for t in xid:
        assert {j["job_id"] for j in t["jobs"]} == after, t  # no kernel-log job of its own
        if os.geteuid() == 0:
            assert t["verdict"] == "pass", t
    # The profile takes the GRES GPUs for real and NVML is not installed: NVLink is not judged.
    for t in fabric:
        assert t["verdict"] == "not_judged" and "NVLink error counters not read (NVML unusable" in t["message"], t

"""A node that drops off the network in the middle of the across-node sweep (its link taken down
inside its namespace, its processes left running): the sweep ends within its collective timeout,
and the failure names the node and the collective. On node3/node4 over gloo; the one-GPU H100
test machine runs the same over NCCL (tools/prove-multinode-gpu link-down)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from faults_support import (
    SHARED,
    cluster_handle,
    fault_profile,
    finish,
    pytest_argv,
    restore_nodes,
    start_pytest,
    wait_until,
)

pytestmark = pytest.mark.integration

SWEEP = '[profiles.faults.nccl]\nmin_bytes = "64KiB"\nmax_bytes = "4MiB"\njudge_from_bytes = "1MiB"\ntimeout_s = 15\n'


def tasks_started(job_id: str, tasks: int = 2) -> bool:
    logs = Path(SHARED, ".pytest-gpucluster").glob(f"*/jobs/**/{job_id}_*_log.out")
    return sum("Starting with JobEnvironment" in p.read_text(errors="replace") for p in logs) >= tasks


def test_link_down_mid_sweep_ends_the_sweep_naming_the_node(slurm_cluster, tmp_path):
    profile = fault_profile(tmp_path, extra_text=SWEEP)
    results = tmp_path / "results.json"
    argv = pytest_argv(profile, results, "tests/acceptance/test_nccl.py", "-k", "across_nodes and all_reduce")
    cluster = cluster_handle(slurm_cluster)
    t0 = time.monotonic()
    proc = start_pytest(argv)
    try:

        def sweep_running() -> str:
            assert proc.poll() is None, proc.communicate()[0]
            running = [j["id"] for j in profile.jobs() if j["state"] == "RUNNING" and j["name"].endswith("-nccl-inter")]
            return running[0] if running and tasks_started(running[0]) else ""

        wait_until("the across-node sweep's tasks to start", sweep_running, 60)
        time.sleep(2)  # the ranks meet and the sweep starts
        cluster.set_link("node4", up=False)
        cut = time.monotonic()
        out = finish(proc, timeout=150)
        ended_after = time.monotonic() - cut
    finally:
        cluster.set_link("node4", up=True)
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
        profile.cancel_all()
        restore_nodes(slurm_cluster)
    doc = json.loads(results.read_text())
    (test,) = [t for t in doc["tests"] if "across_nodes[all_reduce]" in t["nodeid"]]
    assert test["outcome"] in ("failed", "error"), out
    assert "node4" in test["message"], test["message"]
    assert "all_reduce" in test["nodeid"]
    assert doc["acceptance"]["verdict"] in ("REJECTED", "INCOMPLETE")
    assert ended_after < 90, (
        f"ended {ended_after:.0f} s after the link went down; run took {time.monotonic() - t0:.0f} s"
    )

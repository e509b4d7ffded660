"""The inventory, homogeneity and rank-failure acceptance tests against the real Slurm test
cluster (profile ``ci``): each runs the suite as a user would, in a fresh pytest process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gpucluster_testcluster import ClusterInfo

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
RUN_TIMEOUT_S = 420.0


def _suite(cluster: ClusterInfo, tmp_path: Path, *args: str) -> tuple[int, str, dict[str, Any]]:
    results = tmp_path / "results.json"
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "-p",
        "no:cacheprovider",
        "--cluster=ci",
        f"--gpucluster-results={results}",
        "-rA",
        "--no-header",
        *args,
    ]
    done = subprocess.run(
        cmd, cwd=ROOT, env=cluster.env(), capture_output=True, text=True, timeout=RUN_TIMEOUT_S, check=False
    )
    output = done.stdout + done.stderr
    return done.returncode, output, json.loads(results.read_text()) if results.exists() else {}


def _outcomes(doc: dict[str, Any]) -> dict[str, str]:
    return {t["nodeid"].split("::")[-1]: t["outcome"] for t in doc.get("tests", [])}


def test_inventory_of_both_nodes_and_they_match(slurm_cluster: ClusterInfo, tmp_path: Path) -> None:
    rc, out, doc = _suite(slurm_cluster, tmp_path, "tests/acceptance/test_inventory.py")
    assert rc == 0, out
    assert sorted(doc["inventory"]) == ["node1", "node2"]
    for node in ("node1", "node2"):
        summary = doc["inventory"][node]["summary"]
        assert summary["kernel"] == os.uname().release  # namespaced nodes share this machine's kernel
        assert summary["logical_cpus"] == os.cpu_count()
        assert summary["slurm"].startswith("22.05")
        assert doc["inventory"][node]["filesystems"], "the shared fs and /tmp mounts are listed"
    outcomes = _outcomes(doc)
    assert outcomes["test_node_matches_the_others[node1]"] == "passed"
    assert outcomes["test_node_matches_the_others[node2]"] == "passed"
    assert outcomes["test_node_memory[node2]"] == "passed"
    assert outcomes["test_cpus_and_memory_per_gpu[node1]"] == "skipped"  # GRES-only GPUs: NVML sees none


def test_profile_demanding_another_kernel_and_ram_fails_naming_each_node(
    slurm_cluster: ClusterInfo, tmp_path: Path
) -> None:
    text = (ROOT / "thresholds.toml").read_text()
    assert "[profiles.ci]\n" in text
    demanding = text.replace(
        "[profiles.ci]\n", '[profiles.ci]\nexpect_kernel = "5.15.0-119-generic"\nexpect_memory_gib = 2015.5\n', 1
    )
    thresholds = tmp_path / "thresholds.toml"
    thresholds.write_text(demanding)
    rc, out, doc = _suite(
        slurm_cluster, tmp_path, f"--gpucluster-thresholds={thresholds}", "tests/acceptance/test_inventory.py"
    )
    assert rc == 1, out
    kernel = os.uname().release
    for node in ("node1", "node2"):
        assert f"{node}: kernel {kernel}, profile expects 5.15.0-119-generic" in out, out
        assert f"{node}: inventory.memory_spread (RAM " in out, out
    assert "vs expected 2015.5 GiB) = " in out, out
    assert "is above the fail line 5 %" in out, out
    outcomes = _outcomes(doc)
    assert outcomes["test_node_matches_the_profile[node1]"] == "failed"
    assert outcomes["test_node_memory[node2]"] == "failed"
    assert outcomes["test_node_matches_the_others[node1]"] == "passed"  # the nodes still match each other


def test_rank_failure_propagates_across_nodes_with_gloo(slurm_cluster: ClusterInfo, tmp_path: Path) -> None:
    # The NCCL file first: its test would submit its job before any other. The rank-failure job
    # is the run's one early job holding GPUs (no isolation pair, no probe job): it starts ahead.
    rc, out, doc = _suite(
        slurm_cluster,
        tmp_path,
        "tests/acceptance/test_nccl.py",
        "tests/acceptance/test_rank_failure.py",
        "-k",
        "dead_rank or all_reduce-node1",
    )
    assert rc == 0, out
    test, intra = (next(t for t in doc["tests"] if key in t["nodeid"]) for key in ("dead_rank", "inside_node"))
    (rf_job,), (nccl_job,) = test["jobs"], intra["jobs"]
    assert rf_job["name"].endswith("-rank-failure") and nccl_job["name"].endswith("-nccl-intra")
    assert rf_job["submitted_at"] < nccl_job["submitted_at"], (rf_job, nccl_job)
    assert nccl_job["submitted_at"] >= rf_job["ran_to"], (rf_job, nccl_job)  # a measurement waits for it
    (m,) = [m for m in test["measurements"] if m["metric"] == "robustness.rank_failure_teardown"]
    assert m["status"] == "pass"
    assert 0.0 <= m["value"] < 120.0
    assert "rank 1 on node2 exited with 17" in m["detail"]
    assert "rank 0 on node1: stopped" in m["detail"]
    print(f"\nrank-failure teardown on the test cluster (gloo, 2 nodes): {m['value']} s — {m['detail']}")

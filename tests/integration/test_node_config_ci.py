"""The node configuration check against the real Slurm test cluster (profile ``ci``): a clean run
passes the limits on both nodes; with node2's slurmd held to a 64 KiB memlock limit (what its
jobs' tasks then get, whatever the submitting shell has) node2 is named for RLIMIT_MEMLOCK with
the value found and expected, and node1 still passes. node2's slurmd is restarted afterwards,
which gives it back its limit (raising a hard limit again needs a privilege the test may lack)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gpucluster_testcluster import ClusterInfo, TestCluster

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
RUN_TIMEOUT_S = 300.0
FAULT_NODE = "node2"
MEMLOCK_BYTES = 64 * 1024


def _suite(cluster: ClusterInfo, tmp_path: Path, name: str) -> tuple[int, str, dict[str, Any]]:
    results = tmp_path / f"{name}.json"
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
        "tests/acceptance/test_node_config.py",
    ]
    done = subprocess.run(
        cmd, cwd=ROOT, env=cluster.env(), capture_output=True, text=True, timeout=RUN_TIMEOUT_S, check=False
    )
    return done.returncode, done.stdout + done.stderr, json.loads(results.read_text()) if results.exists() else {}


def _tests(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {t["nodeid"].split("::")[-1]: t for t in doc.get("tests", [])}


def _memlock(pid: int) -> tuple[str, str]:
    for line in Path(f"/proc/{pid}/limits").read_text().splitlines():
        if line.startswith("Max locked memory"):
            soft, hard = line.split()[3:5]
            return soft, hard
    raise AssertionError(f"/proc/{pid}/limits has no 'Max locked memory' row")


def _slurmd_pid(cluster: TestCluster) -> int:
    return int(cluster.paths.slurmd_pid(FAULT_NODE).read_text().strip())


def test_memlock_of_one_slurmd_names_that_node_and_a_clean_run_passes(
    slurm_cluster: ClusterInfo, tmp_path: Path
) -> None:
    rc, out, doc = _suite(slurm_cluster, tmp_path, "clean")
    assert rc == 0, out
    clean = _tests(doc)
    for node in ("node1", "node2"):
        assert clean[f"test_task_limits[{node}]"]["outcome"] == "passed", out
        assert clean[f"test_task_limits[{node}]"]["findings"] == [], out
    assert clean[f"test_pcie_acs_off_above_gpus_and_nics[{FAULT_NODE}]"]["outcome"] == "skipped"  # GRES-only or a VM
    caps = clean[f"test_gpu_power_limit_clocks_and_compute_mode[{FAULT_NODE}]"]
    assert caps["verdict"] == "n/a" and "gpus_are_real = false" in caps["message"], caps  # no NVML to read

    cluster = TestCluster.from_running()
    assert cluster is not None, "the test cluster stopped"
    before = _memlock(_slurmd_pid(cluster))
    subprocess.run(
        ["prlimit", "--pid", str(_slurmd_pid(cluster)), f"--memlock={MEMLOCK_BYTES}:{MEMLOCK_BYTES}"],
        check=True,
        timeout=10,
    )
    try:
        rc, out, doc = _suite(slurm_cluster, tmp_path, "fault")
    finally:
        cluster.kill_slurmd(FAULT_NODE)
        cluster.start_slurmd(FAULT_NODE)
    assert _memlock(_slurmd_pid(cluster)) == before, "node2's slurmd did not get its memlock limit back"

    faulty = _tests(doc)
    assert faulty["test_task_limits[node1]"]["findings"] == [], out
    assert faulty["test_task_limits[node1]"]["verdict"] == "pass", out
    (finding,) = faulty["test_task_limits[node2]"]["findings"]
    assert finding["scope"] == "node_setting" and finding["setting"] == "RLIMIT_MEMLOCK", finding
    assert finding["nodes"] == ["node2"] and finding["culprits"] == ["node2"], finding
    assert finding["found"] == "64 KiB", finding
    assert finding["expected"].endswith("or more (the majority of the tested nodes)"), finding
    assert "PropagateResourceLimitsExcept" in finding["remedy"], finding
    assert faulty["test_task_limits[node2]"]["verdict"] == "warn", out  # no RDMA on the test cluster

"""The infrastructure acceptance checks against the real Slurm test cluster: each passes on the
healthy cluster and fails, naming the node, on a fault the test really produces."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from gpucluster_testcluster import ClusterInfo

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
RUN_TIMEOUT_S = 420


def acceptance(info: ClusterInfo, *args: str) -> tuple[int, str]:
    """Run the acceptance suite as an operator would; (exit status, output)."""
    argv = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-rA", "-W", "always", *args]
    proc = subprocess.run(
        argv, cwd=REPO, env=info.env(), capture_output=True, text=True, timeout=RUN_TIMEOUT_S, check=False
    )
    return proc.returncode, proc.stdout + proc.stderr


def profile_file(tmp_path: Path, name: str, **overrides: object) -> Path:
    """thresholds.toml plus a profile copied from [profiles.ci] with ``overrides``."""
    keys = {
        "executor": "slurm",
        "partition": "debug",
        "nodes": 2,
        "gpus_per_node": 4,
        "gpus_are_real": False,
        "shared_fs": "/srv/gpucluster-ci/shared",
        "slurm_conf": "/var/lib/gpucluster-testcluster/etc/slurm.conf",
        "device_cgroups": False,
        "job_timeout_min": 5,
        "queue_timeout_s": 60,
        "thresholds": "cpu",
        **overrides,
    }
    lines = [f"\n[profiles.{name}]"]
    for key, value in keys.items():
        text = ("true" if value else "false") if isinstance(value, bool) else value
        lines.append(f"{key} = {text}" if isinstance(value, int) else f'{key} = "{text}"')
    path = tmp_path / "thresholds.toml"
    path.write_text((REPO / "thresholds.toml").read_text() + "\n".join(lines) + "\n")
    return path


def scontrol(info: ClusterInfo, *args: str) -> None:
    subprocess.run(["scontrol", *args], env=info.env(), check=True, timeout=30, capture_output=True)


def test_slurm_health_passes_then_names_a_drained_node(slurm_cluster):
    rc, out = acceptance(slurm_cluster, "--cluster=ci", "tests/acceptance/test_slurm_health.py")
    assert rc == 0, out
    assert "5 passed" in out
    scontrol(slurm_cluster, "update", "nodename=node2", "state=drain", "reason=integration test")
    try:
        rc, out = acceptance(slurm_cluster, "--cluster=ci", "tests/acceptance/test_slurm_health.py")
    finally:
        scontrol(slurm_cluster, "update", "nodename=node2", "state=resume")
    assert rc == 1, out
    assert "FAILED tests/acceptance/test_slurm_health.py::test_nodes_are_usable" in out
    # IDLE+DRAIN, or MIXED+DRAIN while other jobs still run there
    assert re.search(r"node2: state [A-Z]+\+DRAIN, reason: 'integration test'", out), out
    assert "4 passed" in out


def test_sharedfs_passes_on_the_shared_dir(slurm_cluster):
    rc, out = acceptance(slurm_cluster, "--cluster=ci", "tests/acceptance/test_sharedfs.py")
    assert rc == 0, out
    assert "5 passed" in out
    assert not list(Path("/srv/gpucluster-ci/shared").glob(".pytest-gpucluster/*/sharedfs-*")), "left its directory"


def test_sharedfs_fails_where_each_node_has_its_own_directory(slurm_cluster, tmp_path):
    # The test cluster's nodes share one mount namespace, so every path is shared. A root that
    # each node expands to its own folder ($SLURMD_NODENAME) is a directory truly private to
    # each node, as on a node where the shared filesystem failed to mount.
    base = tmp_path / "private"
    for node in ("node1", "node2", "$SLURMD_NODENAME"):
        (base / node).mkdir(parents=True)
    thresholds = profile_file(tmp_path, "ci_private", shared_fs=f"{base}/$SLURMD_NODENAME")
    rc, out = acceptance(
        slurm_cluster,
        f"--gpucluster-thresholds={thresholds}",
        "--cluster=ci_private",
        "tests/acceptance/test_sharedfs.py",
    )
    assert rc == 1, out
    assert "FAILED tests/acceptance/test_sharedfs.py::test_mounted_everywhere_as_one_filesystem" in out
    for node in ("node1", "node2"):
        assert f"{node}: does not see login-marker that the login node wrote in" in out
        assert f"{base}/{node} on {node} is not the login node's filesystem (not shared" in out
        assert f"{node}: took no part (it does not see the login node's directory)" in out
    assert "4 failed, 1 passed" in out  # capacity is still measured on each node's own folder


def test_gpu_isolation_passes_with_gres_and_warns_without_cgroups(slurm_cluster):
    rc, out = acceptance(slurm_cluster, "--cluster=ci", "tests/acceptance/test_gpu_isolation.py")
    assert rc == 0, out
    assert "3 passed" in out and "1 n/a" in out
    assert "GpuClusterWarning: node1 (job" in out and "device cgroups are off on this cluster" in out
    assert "has GRES-only GPUs (gpus_are_real = false); this check needs GPU devices" in out


def test_infiniband_does_not_apply_without_hcas_and_fails_where_some_are_expected(slurm_cluster, tmp_path):
    rc, out = acceptance(slurm_cluster, "--cluster=ci", "tests/acceptance/test_infiniband.py")
    assert rc == 0, out
    assert "2 × profile 'ci' expects no InfiniBand (ib_hcas = 0)" in out
    thresholds = profile_file(tmp_path, "ci_ib", ib_hcas=8)
    rc, out = acceptance(
        slurm_cluster, f"--gpucluster-thresholds={thresholds}", "--cluster=ci_ib", "tests/acceptance/test_infiniband.py"
    )
    assert rc == 1, out
    for node in ("node1", "node2"):
        assert f"{node}: no RDMA device under /sys/class/infiniband" in out


def test_gpu_health_skips_with_a_reason_on_gres_only_gpus(slurm_cluster):
    rc, out = acceptance(slurm_cluster, "--cluster=ci", "tests/acceptance/test_gpu_health.py")
    assert rc == 0, out
    assert "has GRES-only GPUs (gpus_are_real = false); this check needs GPU devices" in out
    assert "gpucluster: PARTIAL: 0 selected checks passed" in out and "\n7 n/a in " in out


def test_a_node_short_of_gpus_fails_the_node_probe_but_infiniband_is_still_read(slurm_cluster, tmp_path):
    # The profile expects 5 GPUs per node, the nodes have 4: Slurm cannot place the node-probe job
    # (it holds every GPU). The inventory says why, naming the nodes; IB ports need no GPU and are
    # read in a job of their own (the profile expects one HCA; the namespaced nodes have none).
    thresholds = profile_file(tmp_path, "ci_short", gpus_per_node=5, ib_hcas=1)
    rc, out = acceptance(
        slurm_cluster,
        f"--gpucluster-thresholds={thresholds}",
        "--cluster=ci_short",
        "tests/acceptance/test_inventory.py",
        "tests/acceptance/test_infiniband.py",
    )
    assert rc == 1, out
    assert "node1: no RDMA device under /sys/class/infiniband" in out
    assert "ERROR tests/acceptance/test_inventory.py::test_node_matches_the_profile[node1]" in out
    assert re.search(r"node-probe: submission refused: .*node1 offers 4 GPU\(s\) \(Gres=gpu:4\)", out), out


def test_light_jobs_start_together_and_a_measurement_waits_for_them(slurm_cluster, tmp_path):
    results = tmp_path / "results.json"
    # No intra-node NCCL job in this run, so the node probe is a job of its own, started ahead.
    rc, out = acceptance(
        slurm_cluster,
        "--cluster=ci",
        f"--gpucluster-results={results}",
        "tests/acceptance/test_compute.py",
        "tests/acceptance/test_placement.py",
        "tests/acceptance/test_sharedfs.py",
        "tests/acceptance/test_inventory.py",
        "-k",
        "compute_and_memory or placement or sharedfs or matches_the_profile",
    )
    assert rc == 0, out
    jobs = {j["job_id"]: j for t in json.loads(results.read_text())["tests"] for j in t["jobs"]}
    layouts = ("-placement-one-task", "-placement-two-tasks", "-placement-two-nodes")
    light = [j for j in jobs.values() if j["name"].endswith((*layouts, "-sharedfs", "-node-probe"))]
    ceilings = [j for j in jobs.values() if j["name"].endswith("-ceilings")]
    assert len(light) == 5 and len(ceilings) == 1, sorted(j["name"] for j in jobs.values())  # 3 placement layouts
    submitted = sorted(j["submitted_at"] for j in light)
    assert submitted[-1] - submitted[0] < 2.0, submitted  # together, before the first test ran
    # The compute job (the first test in file order) was submitted only after every light job ended.
    assert ceilings[0]["submitted_at"] >= max(j["ran_to"] for j in light), (ceilings, light)
    assert all(
        j["seen_at"] >= j["ran_to"] >= j["ran_from"] >= j["process_from"] >= j["submitted_at"] for j in jobs.values()
    )
    # Every task said how long its start-up took and what CPU it used (interpreter and imports).
    placement = [j["start_up"] for j in light if j["name"].endswith(layouts)]
    assert sorted(s["tasks"] for s in placement) == [1, 2, 2], placement  # the three small layouts' tasks
    assert all(s["cpu_median_s"] > 0 and s["wall_max_s"] >= s["wall_median_s"] for s in placement), placement

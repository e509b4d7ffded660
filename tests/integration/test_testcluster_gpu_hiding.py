"""A node of the test cluster cannot open another node's GPUs: in each node's mount namespace
/dev/null covers the other nodes' GRES device files, as a real node has only its own. Shown here on
the fake-GPU files (<state>/dev/gpuK are /dev/zero's numbers, /dev/null's are 1:3); on the GPU
machine the same mounts cover /dev/nvidiaN."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from gpucluster_testcluster import ClusterInfo, TestCluster
from gpucluster_testcluster import config as tc_config

pytestmark = pytest.mark.integration

NULL = "1:3"
OWN = "{:x}:{:x}".format(*tc_config.FAKE_GPU_DEVICE)


def devices_seen_by(info: ClusterInfo, node: str, files: list[Path]) -> dict[str, str]:
    """``stat`` of ``files`` in a job step on ``node``: path → "major:minor" (hex, as stat prints)."""
    argv = ["srun", "-p", info.partition, "-w", node, "-N1", "-n1", "-t", "1", "stat", "-c", "%n %t:%T"]
    proc = subprocess.run(
        [*argv, *map(str, files)], env=info.env(), capture_output=True, text=True, timeout=60, check=False
    )
    assert proc.returncode == 0, proc.stderr
    return dict(line.split() for line in proc.stdout.splitlines())


def test_a_job_opens_its_nodes_gpu_files_and_finds_dev_null_over_the_others(slurm_cluster: ClusterInfo) -> None:
    running = TestCluster.from_running(slurm_cluster.state_dir)
    assert running is not None
    # The same parameters: returns at once, or restarts a cluster that an older checkout started.
    info = running.up()
    assert info.gpu_mode == "fake" and info.gpus_per_node >= 2 and len(info.nodes) >= 2
    g = info.gpus_per_node
    files = [info.state_dir / "dev" / f"gpu{k}" for k in range(g * len(info.nodes))]
    # The host (and slurmctld) sees every node's files as they were made.
    assert {f"{os.major(f.stat().st_rdev):x}:{os.minor(f.stat().st_rdev):x}" for f in files} == {OWN}
    for i, node in enumerate(info.nodes[:2]):
        own = set(map(str, files[g * i : g * (i + 1)]))
        seen = devices_seen_by(info, node, files)
        assert seen == {str(f): OWN if str(f) in own else NULL for f in files}, (node, seen)


def test_a_restarted_slurmd_hides_the_other_nodes_gpus_again(slurm_cluster: ClusterInfo) -> None:
    running = TestCluster.from_running(slurm_cluster.state_dir)
    assert running is not None
    info = running.up()
    node = info.nodes[-1]  # the fault tests' node: restarting it leaves the ci profile's nodes alone
    running.kill_slurmd(node)
    running.start_slurmd(node)
    g, last = info.gpus_per_node, len(info.nodes) - 1
    files = [info.state_dir / "dev" / f"gpu{k}" for k in range(g * len(info.nodes))]
    seen = devices_seen_by(info, node, files)
    assert [seen[str(f)] for f in files] == [NULL] * (g * last) + [OWN] * g, seen

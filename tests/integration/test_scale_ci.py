"""The light suite (the checks that need no real GPU) at 8 nodes of 8 GPUs: it passes, and the run
leaves no job in the queue and no process on the machine.

The session's cluster (4 nodes of 4 GPUs) is taken down for an 8-node one in host network mode
(8 CPUs per node, so a node takes 8 tasks), and brought back afterwards, so the session's other
tests keep working. benchmarks/scale.py measures the same run from 2 to 64 nodes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from gpucluster_testcluster import ClusterInfo, TestCluster

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
NODES = 8
GPUS_PER_NODE = 8
LIGHT_SUITE = [
    "tests/acceptance/test_slurm_health.py",
    "tests/acceptance/test_placement.py",
    "tests/acceptance/test_sharedfs.py",
    "tests/acceptance/test_inventory.py",
    "tests/acceptance/test_rank_failure.py",
]
PROFILE = f"""
[profiles.scale{NODES}]
extends = "ci"
nodes = {NODES}
gpus_per_node = {GPUS_PER_NODE}
"""


def processes_carrying(marker: str) -> list[str]:
    """Live processes (zombies aside) whose environment holds ``marker``: sbatch passes the
    submitting process's environment on to every task of its jobs."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if (entry / "stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
                continue
            if marker.encode() not in (entry / "environ").read_bytes():
                continue
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        found.append(f"{entry.name}: {cmdline[:120]}")
    return found


def queue(env: dict[str, str]) -> list[str]:
    """Every job the controller still has pending, running or completing."""
    out = subprocess.run(
        ["squeue", "-h", "-o", "%i %T %j"], env=env, capture_output=True, text=True, timeout=30, check=True
    ).stdout
    return out.splitlines()


def test_light_suite_at_eight_nodes_of_eight_gpus(slurm_cluster: ClusterInfo, tmp_path: Path) -> None:
    running = TestCluster.from_running(slurm_cluster.state_dir)
    assert running is not None
    running.down()
    big = TestCluster(
        nodes=NODES, gpus_per_node=GPUS_PER_NODE, cpus_per_node=GPUS_PER_NODE, network="host", install=False
    )
    try:
        info = big.up()
        thresholds = tmp_path / "thresholds.toml"
        thresholds.write_text((REPO / "thresholds.toml").read_text() + PROFILE)
        results = tmp_path / "results.json"
        marker = f"GPUCLUSTER_SCALE_RUN={uuid.uuid4().hex}"
        key, value = marker.split("=")
        env = {**info.env(), key: value}
        argv = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", f"--cluster=scale{NODES}"]
        argv += [f"--gpucluster-thresholds={thresholds}", f"--gpucluster-results={results}", *LIGHT_SUITE]
        t0 = time.monotonic()
        proc = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=300, check=False)
        took = time.monotonic() - t0
        assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
        doc = json.loads(results.read_text())
        outcomes = {t["outcome"] for t in doc["tests"]}
        assert outcomes <= {"passed", "skipped"}, outcomes
        assert doc["nodes"] == list(info.nodes)
        placed = [t for t in doc["tests"] if "test_task_placement" in t["nodeid"]]
        assert placed and all(t["outcome"] == "passed" for t in placed)
        # The run cancelled or waited out its jobs before it exited: the queue is empty at once
        # (completing jobs aside, which leave within Slurm's KillWait) and no task lives on.
        deadline = time.monotonic() + 15
        while queue(env) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert queue(env) == []
        assert processes_carrying(marker) == []
        print(f"light suite at {NODES} nodes: {took:.1f} s, {len(doc['tests'])} tests")
    finally:
        big.down()
        running.up()
    assert running.is_up()

"""The soak on node3/node4 of the test cluster, CPU ranks standing in for GPUs (gloo, 4-second
cycles): a CPU hog started on node3 mid-soak names node3 with the cycle it began in and ends
node3's soak while node4 soaks on; SIGTERM mid-soak keeps every finished cycle and says how far
each node came. (The clean soak runs with the whole handover: test_handover_ci.py.)

Each node's soak ranks are pinned to a core of their own for these tests (its slurmd's threads,
which its jobs inherit), so that a hog on node3's core slows node3 alone, as it would on a
machine of its own; the affinity is given back afterwards."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from faults_support import (
    fault_profile,
    finish,
    restore_nodes,
    run_pytest,
    start_suite,
    wait_until,
)

from gpucluster_testcluster.config import Paths

pytestmark = pytest.mark.integration

SOAK = "tests/acceptance/test_soak.py"
# The ci profile's soak: 4-second cycles; its CPU stand-ins are judged by [soak.cpu_rules].
SOAK_TABLE = {"cycle_s": 4, "sdc_every": 3}
AREA = Path("/srv/gpucluster-ci/shared/.pytest-gpucluster")


def _slurmd_pid(cluster, node: str) -> str:
    paths = Paths(state_dir=cluster.state_dir, shared_dir=cluster.shared_dir)
    return paths.slurmd_pid(node).read_text().strip()


def _pin(pid: str, cpus: str) -> None:
    subprocess.run(["taskset", "-a", "-p", "-c", cpus, pid], check=True, capture_output=True, timeout=30)


@pytest.fixture
def pinned(slurm_cluster) -> Iterator[dict[str, str]]:
    """node3's slurmd (and so its jobs) on CPU 0, node4's on CPU 1; node → its CPU."""
    cpus = os.cpu_count() or 1
    if cpus < 2:
        pytest.skip(f"this machine has {cpus} CPU; a node of its own needs 2")
    where = {"node3": "0", "node4": "1"}
    for node, cpu in where.items():
        _pin(_slurmd_pid(slurm_cluster, node), cpu)
    try:
        yield where
    finally:
        for node in where:
            _pin(_slurmd_pid(slurm_cluster, node), f"0-{cpus - 1}")
        restore_nodes(slurm_cluster)


def _stream_cycles(node: str, since: float) -> int:
    """Cycles node's first rank has streamed so far, in the soak folders made since ``since``."""
    best = 0
    for path in AREA.glob(f"**/soak-*/{node}.cpu0.jsonl"):
        if path.parent.stat().st_mtime < since:
            continue
        with path.open() as f:
            best = max(best, sum('"kind":"cycle"' in line for line in f))
    return best


def test_a_cpu_hog_on_one_node_mid_soak_names_it_with_its_cycle_and_the_other_soaks_on(slurm_cluster, tmp_path, pinned):
    profile = fault_profile(tmp_path, soak=SOAK_TABLE, queue_timeout_s=20, job_timeout_min=3)
    since = time.time()
    proc, results = start_suite(profile, tmp_path, SOAK, "--gpucluster-soak=50s")
    hogs: list[subprocess.Popen[bytes]] = []
    try:
        # The hog starts once node3 has its own start (cycles 1-3) and one cycle more.
        wait_until(
            "node3 streaming its fifth cycle", lambda: proc.poll() is None and _stream_cycles("node3", since) >= 5, 90
        )
        began = _stream_cycles("node3", since)
        enter = ["nsenter", "-t", _slurmd_pid(slurm_cluster, "node3"), "-n", "-u"]
        # Spinning processes on node3's core, each in a session of its own: with the scheduler's
        # autogroups on, hogs sharing one session would count as one and leave the ranks half
        # of the core, a drop too close to the fail line of 40 %; four sessions leave them a fifth.
        hog = [*enter, "taskset", "-c", pinned["node3"], sys.executable, "-c", "while True: pass"]
        hogs = [subprocess.Popen(hog, start_new_session=True) for _ in range(4)]
        out = finish(proc, timeout=150)
    finally:
        for h in hogs:
            h.kill()
        if proc.poll() is None:
            proc.kill()
        profile.cancel_all()
    doc = json.loads(results.read_text())
    nodes = doc["acceptance"]["nodes"]["verdicts"]
    assert nodes["node3"]["verdict"] == "REJECTED" and nodes["node4"]["verdict"] != "REJECTED", (nodes, out[-3000:])
    failed = [f for t in doc["tests"] for f in t["findings"] if f["severity"] == "fail"]
    assert failed and {f["nodes"][0] for f in failed} == {"node3"}, failed
    first = failed[0]
    assert first["text"].startswith("node3:cpu") and "below its own start" in first["text"], first
    assert first["cycle"] >= began and f"from cycle {first['cycle']} (" in first["text"], (first, began)
    soak = doc["soak"]["nodes"]
    # node3's soak ended early, for its own failure; node4 soaked the whole duration.
    assert soak["node3"]["ended"] == "stopped" and soak["node4"]["ended"] == "duration", soak
    assert soak["node3"]["cycles"] < soak["node4"]["cycles"], (soak["node3"]["cycles"], soak["node4"]["cycles"])
    assert "node3's soak ends here (it goes to repair)" in out
    print(f"hog from cycle {began}: {first['text']}; node4 {soak['node4']['cycles']} cycles")


def test_sigterm_mid_soak_keeps_the_finished_cycles_and_says_how_far_each_node_came(slurm_cluster, tmp_path):
    profile = fault_profile(tmp_path, soak=SOAK_TABLE, queue_timeout_s=20, job_timeout_min=3)
    since = time.time()
    proc, results = start_suite(profile, tmp_path, SOAK, "--gpucluster-soak=5m")
    try:
        wait_until(
            "both nodes streaming their third cycle",
            lambda: proc.poll() is None and min(_stream_cycles(n, since) for n in ("node3", "node4")) >= 3,
            90,
        )
        proc.send_signal(signal.SIGTERM)
        t0 = time.monotonic()
        out = finish(proc, timeout=60)
        ended_after = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            proc.kill()
        profile.cancel_all()
        restore_nodes(slurm_cluster)
    doc = json.loads(results.read_text())
    acc = doc["acceptance"]
    assert doc["status"] == "interrupted" and acc["verdict"] == "INCOMPLETE", (acc, out[-3000:])
    soak = doc["soak"]
    assert soak.get("interrupted") is True
    for node in ("node3", "node4"):
        kept = soak["nodes"][node]
        assert kept["cycles"] >= 3 and len(kept["gpus"]["cpu0"]["tflops"]) >= 3, kept
    said = " ".join(acc["reasons"])
    assert "the soak of 5 min was interrupted; finished cycles kept: node3 " in said, said
    assert not profile.jobs(), "a soak job was left in the queue"
    assert ended_after < 45, f"pytest ended {ended_after:.0f} s after SIGTERM"
    assert "cycles)" in said


def test_a_soak_longer_than_the_partition_allows_stops_before_any_job(slurm_cluster, tmp_path):
    profile = fault_profile(tmp_path, soak=SOAK_TABLE)
    run = run_pytest(profile, tmp_path, SOAK, "--gpucluster-soak=2h", timeout=120)
    assert run.returncode == 4, run.output[-3000:]
    said = "--gpucluster-soak=2h: each node's soak job needs 126 min (the duration, two cycles and 5 min to start"
    assert said in run.output and "partition 'debug' allows 1 h 0 min (MaxTime)" in run.output, run.output[-3000:]
    assert not profile.jobs() and run.results == {}

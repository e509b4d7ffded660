"""Faults outside the nodes, produced for real on node3/node4 of the test cluster: the controller
restarting mid-run, the shared filesystem read-only on the login node, other work holding the
nodes, a second run of the suite at the same time. None is a node's fault: the checks they stop are
not judged, the run names the fault in one sentence, and no node is rejected, excluded or drained.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from pathlib import Path

import pytest
from faults_support import (
    FAULT_NODES,
    SHARED,
    fault_profile,
    finish,
    run_pytest,
    slurm_cmd,
    start_controller,
    start_suite,
    stop_controller,
    wait_until,
)

pytestmark = pytest.mark.integration

# Placement (its small layouts start ahead, together) and the node probe's per-node check: several
# jobs, and tests parametrised by node, whose failure would have rejected the node.
SELECTION = (
    "tests/acceptance/test_placement.py",
    "tests/acceptance/test_inventory.py::test_node_matches_the_profile",
)


def _acceptance(doc: dict) -> dict:
    return doc.get("acceptance") or {}


def _no_node_blamed(doc: dict, output: str) -> None:
    nodes = _acceptance(doc)["nodes"]
    rejected = [n for n, v in nodes["verdicts"].items() if v["verdict"] == "REJECTED"]
    assert rejected == [] and nodes["exclude"] == "", (nodes, output[-4000:])


def test_a_controller_restart_mid_run_costs_seconds_not_a_verdict(slurm_cluster, tmp_path):
    profile = fault_profile(tmp_path, queue_timeout_s=20, job_timeout_min=2)
    t0 = time.monotonic()
    proc, results = start_suite(profile, tmp_path, *SELECTION)
    try:
        wait_until("the run's first job in the queue", lambda: proc.poll() is None and profile.jobs(), 60)
        stop_controller(slurm_cluster)
        time.sleep(20)
        assert proc.poll() is None, "the run ended before slurmctld came back"
        start_controller(slurm_cluster)
        out = finish(proc, 240)
    finally:
        start_controller(slurm_cluster)
        if proc.poll() is None:
            proc.kill()
        profile.cancel_all()
    wall = time.monotonic() - t0
    doc = json.loads(results.read_text())
    acc = _acceptance(doc)
    print(f"controller stopped 20 s: {acc['headline']}; {wall:.1f} s")
    assert "the Slurm controller (slurmctld) does not answer" in out  # the run met the outage
    # A short restart costs seconds; at worst a job that began just as slurmctld went away could
    # not start its tasks, and the checks it served are not judged, naming the controller.
    assert acc["verdict"] in ("PARTIAL", "INCOMPLETE"), out[-4000:]
    if acc["verdict"] == "INCOMPLETE":
        assert acc["headline"].startswith("INCOMPLETE: the Slurm controller (slurmctld) stopped answering at "), acc
    assert proc.returncode == 0 if acc["verdict"] == "PARTIAL" else proc.returncode in (1, 10)
    _no_node_blamed(doc, out)
    wait_until("the run's jobs to leave the queue", lambda: profile.jobs() == [], 30)


@pytest.fixture
def read_only_shared(tmp_path):
    """A directory of the shared filesystem, bind-mounted read-only."""
    path = Path(SHARED) / f"faults-ro-{os.getpid()}-{tmp_path.name[-8:]}"
    path.mkdir()
    mounted = False
    try:
        subprocess.run(["mount", "--bind", str(path), str(path)], check=True, timeout=30)
        mounted = True
        subprocess.run(["mount", "-o", "remount,bind,ro", str(path)], check=True, timeout=30)
        yield path
    finally:
        if mounted:
            subprocess.run(["umount", str(path)], check=False, timeout=30)
        subprocess.run(["rm", "-rf", "--", str(path)], check=False, timeout=30)


def test_a_read_only_shared_filesystem_is_one_sentence_and_drains_no_node(slurm_cluster, tmp_path, read_only_shared):
    profile = fault_profile(tmp_path, shared_fs=str(read_only_shared))
    run = run_pytest(
        profile, tmp_path, *SELECTION, "tests/acceptance/test_sharedfs.py", "--gpucluster-drain-failed", timeout=120
    )
    acc = _acceptance(run.results)
    sentence = f"shared_fs '{read_only_shared}' cannot be written from this login node (Read-only file system)"
    print(f"read-only shared_fs: {acc['headline']}; {run.seconds:.1f} s")
    assert acc["verdict"] == "INCOMPLETE" and acc["headline"].startswith(f"INCOMPLETE: {sentence}"), acc
    assert len(acc["reasons"]) == 1, acc["reasons"]  # one sentence for every check it stopped
    stopped = [t for t in run.results["tests"] if t["cluster_fault"]]
    assert len(stopped) >= 8 and all(t["cluster_fault"]["sentence"] == sentence for t in stopped), stopped
    assert run.returncode == 10  # INCOMPLETE: the checks that errored were stopped by the fault, not judged
    _no_node_blamed(run.results, run.output)
    assert run.results.get("drained") == {}
    states = slurm_cmd("sinfo", "-h", "-N", "-n", ",".join(FAULT_NODES), "-o", "%N|%T")
    assert "drain" not in states.lower(), states
    assert profile.jobs() == []


def test_other_work_holding_the_nodes_is_named_and_rejects_no_node(slurm_cluster, tmp_path):
    profile = fault_profile(tmp_path, queue_timeout_s=8)
    held = slurm_cmd(
        "sbatch", "--parsable", "--exclusive", "-N2", "-w", ",".join(FAULT_NODES), "-J", "foreign-work",
        f"--comment={profile.tag}", "-t", "2", "-o", "/dev/null", "--wrap", "sleep 110",
    ).strip()  # fmt: skip
    try:
        wait_until("the other work running", lambda: any(j["state"] == "RUNNING" for j in profile.jobs()), 30)
        run = run_pytest(profile, tmp_path, "tests/acceptance/test_placement.py::test_task_placement[1node-1task]")
    finally:
        profile.cancel_all()
    acc = _acceptance(run.results)
    print(f"other work on the nodes: {acc['headline']}; {run.seconds:.1f} s")
    assert acc["verdict"] == "INCOMPLETE", run.output[-4000:]
    assert re.match(
        rf"INCOMPLETE: other work held node3, node4 past queue_timeout_s \(8 s\): job {held} of \w+ \(foreign-work\), "
        r"RUNNING on node3, node4 \(1 check not judged",
        acc["headline"],
    ), acc["headline"]
    assert run.returncode == 10
    _no_node_blamed(run.results, run.output)


def test_two_runs_at_once_reject_nothing(slurm_cluster, tmp_path):
    # Each run's GPU-isolation pair holds half of every node's GPUs while it waits for its partner:
    # started together, the two pairs would each hold half and wait for the other.
    selection = ("tests/acceptance/test_gpu_isolation.py", "tests/acceptance/test_placement.py")
    profile = fault_profile(tmp_path, queue_timeout_s=60)
    t0 = time.monotonic()
    runs = [start_suite(profile, tmp_path, *selection) for _ in range(2)]
    try:
        outputs = [finish(proc, 300) for proc, _ in runs]
    finally:
        for proc, _ in runs:
            if proc.poll() is None:
                proc.kill()
        profile.cancel_all()
    wall = time.monotonic() - t0
    docs = [json.loads(results.read_text()) for _, results in runs]
    gave_way = sum("gave way to" in out for out in outputs)
    print(f"two runs at once: {[_acceptance(d)['headline'] for d in docs]}; gave way: {gave_way}; {wall:.1f} s")
    for (proc, _), doc, out in zip(runs, docs, outputs, strict=True):
        assert _acceptance(doc)["verdict"] in ("PARTIAL", "INCOMPLETE"), out[-4000:]
        verdict = _acceptance(doc)["verdict"]
        assert proc.returncode == 0 if verdict == "PARTIAL" else proc.returncode in (1, 10), out[-4000:]
        _no_node_blamed(doc, out)
    wait_until("both runs' jobs to leave the queue", lambda: profile.jobs() == [], 30)

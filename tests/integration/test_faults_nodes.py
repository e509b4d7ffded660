"""Jobs that vanish under a running suite, on node3/node4 of the test cluster: a node that dies
(slurmd and the job's processes killed, as in a power loss), a job cancelled from outside, and a
rank that hangs outside a collective. Each fails its test within a bound, naming the job and the
node; the rest of the suite goes on without the lost node; nothing is left in the queue."""

from __future__ import annotations

import json
import re
import shutil
import sys
import time
import uuid
from pathlib import Path

import cloudpickle  # type: ignore[import-untyped]
import pytest
from faults_support import (
    SHARED,
    SLURM_CONF,
    cluster_handle,
    fault_profile,
    finish,
    restore_nodes,
    slurm_cmd,
    start_suite,
    wait_until,
    write_long_test,
)

from pytest_gpucluster.errors import LaunchError
from pytest_gpucluster.launch import JobSpec
from pytest_gpucluster.launch.slurm_backend import SlurmLauncher
from pytest_gpucluster.workloads import sleep as sleep_workload

pytestmark = pytest.mark.integration

cloudpickle.register_pickle_by_value(sys.modules[__name__])


def tasks_started(job_id: str, since: float, tasks: int = 2) -> bool:
    """Every task of ``job_id`` is inside the workload: submitit logged its start. RUNNING in the
    queue is not enough: a node killed while srun still launches the step fails the launch
    instead, and that is a different fault."""
    logs = [
        p
        for p in Path(SHARED, ".pytest-gpucluster").glob(f"*/jobs/*/*/*/{job_id}_*_log.out")
        if p.stat().st_mtime >= since
    ]
    return sum("Starting with JobEnvironment" in p.read_text(errors="replace") for p in logs) >= tasks


def running_job(profile, proc):
    """The id of the fault profile's job once every task of it runs (the suite must still be alive)."""
    since = time.time() - 1

    def found():
        assert proc.poll() is None, proc.communicate()[0]
        job = next((j["id"] for j in profile.jobs() if j["state"] == "RUNNING" and j["name"].endswith("-long")), None)
        return job if job is not None and tasks_started(job, since) else None

    return wait_until("the long job's tasks running", found, 60)


def by_name(results, part):
    found = [t for t in results["tests"] if part in t["nodeid"]]
    assert len(found) == 1, [t["nodeid"] for t in results["tests"]]
    return found[0]


def test_a_node_dying_mid_job_fails_that_test_naming_the_node_and_the_suite_goes_on(slurm_cluster, tmp_path):
    profile = fault_profile(tmp_path)
    long_test = write_long_test(tmp_path, seconds=120)
    proc, results = start_suite(
        profile, tmp_path, str(long_test), "tests/acceptance/test_inventory.py::test_node_matches_the_profile"
    )
    cluster = cluster_handle(slurm_cluster)
    try:
        job_id = running_job(profile, proc)
        killed_at = time.monotonic()
        cluster.kill_slurmd("node4", with_jobs=True)
        out = finish(proc, timeout=120)
        ended_after = time.monotonic() - killed_at
    finally:
        if proc.poll() is None:
            proc.kill()
        profile.cancel_all()
        restore_nodes(slurm_cluster)
    doc = json.loads(results.read_text())
    long = by_name(doc, "test_long_job_on_every_node")
    assert long["outcome"] == "failed", out
    # The launcher's node watch sees node4 go while the job runs, or Slurm ends the job NODE_FAIL
    # first and the failure is traced to node4 afterwards, or Slurm puts the batch job back in the
    # queue for the node failure (its requeue on NODE_FAIL): each must say NodeLostError and name
    # the dead node with Slurm's view of it.
    assert re.match(
        rf"pytest_gpucluster.errors.NodeLostError: job {job_id} \(\w+-long\) on node3, node4: "
        r"(lost its node\(s\) while RUNNING: |ended NODE_FAIL with 2 failed task\(s\): .*; "
        r"|was put back in the queue \([A-Z_]+\) after it had started: )"
        r"node4 is [A-Z_+]*(NOT_RESPONDING|DOWN)[A-Z_+]*( \([^)]*\))?",
        long["message"],
        re.DOTALL,
    ), long["message"]
    # SlurmdTimeout is 20 s here; the launcher gives up within one node check after Slurm's
    # first failed ping, well before the job's own 1-minute limit.
    assert ended_after < 60, f"pytest ended {ended_after:.0f} s after the node died"
    assert by_name(doc, "[node3]")["outcome"] == "passed", out[-4000:]
    # The check node4 would have had fails for node4, with the first evidence; no job tried it.
    on_node4 = by_name(doc, "[node4]")
    assert on_node4["outcome"] == "error" and not on_node4["job_ids"], on_node4
    assert re.search(
        r"node4 was lost earlier in this run: .*(NOT_RESPONDING|DOWN).* \(seen under job \d+ ", on_node4["message"]
    ), on_node4["message"]
    seen = doc["environment"]["lost_nodes"]["node4"]
    assert seen["job"] and seen["when"] and ("NOT_RESPONDING" in seen["why"] or "DOWN" in seen["why"]), seen
    assert doc["status"] == "complete"
    wait_until("the dead node's job to leave the queue", lambda: profile.jobs() == [], 30)


def test_a_job_cancelled_from_outside_fails_its_test_at_once(slurm_cluster, tmp_path):
    profile = fault_profile(tmp_path)
    proc, results = start_suite(profile, tmp_path, str(write_long_test(tmp_path, seconds=120)))
    try:
        job_id = running_job(profile, proc)
        cancelled_at = time.monotonic()
        slurm_cmd("scancel", job_id)
        out = finish(proc, timeout=60)
        ended_after = time.monotonic() - cancelled_at
    finally:
        if proc.poll() is None:
            proc.kill()
        profile.cancel_all()
    long = by_name(json.loads(results.read_text()), "test_long_job_on_every_node")
    assert long["outcome"] == "failed", out
    assert re.match(
        rf"pytest_gpucluster.errors.LaunchError: job {job_id} \(\w+-long\) on node3, node4: ended CANCELLED BY 0 "
        r"with 2 failed task\(s\): task 0 on node3: no result; task 1 on node4: no result\nlogs: ",
        long["message"],
    ), long["message"]
    assert ended_after < 20, f"pytest ended {ended_after:.0f} s after scancel"
    # Slurm may still show the cancelled job COMPLETING for a moment while node3 kills its step.
    wait_until("the cancelled job to leave the queue", lambda: profile.jobs() == [], 30)


def test_a_hung_rank_ends_the_job_through_the_collective_timeout(slurm_cluster, tmp_path, monkeypatch):
    monkeypatch.setenv("SLURM_CONF", SLURM_CONF)
    folder = slurm_cluster.shared_dir / f"faults-hang-{uuid.uuid4().hex[:8]}"
    tag = f"faults-{uuid.uuid4().hex[:8]}"
    launcher = SlurmLauncher(folder=folder, partition="debug", sbatch_extra={"comment": tag}, queue_timeout_s=30)
    launcher.failed_task_grace_s = 5.0
    spec = JobSpec("hang", nodes=2, nodelist=("node3", "node4"), timeout_min=2)
    t0 = time.monotonic()
    try:
        with pytest.raises(LaunchError) as info:
            launcher.run(sleep_workload.hang_one_rank, spec, hung_rank=1, timeout_s=5.0, hang_s=300.0)
    finally:
        launcher.cancel_all()
        shutil.rmtree(folder, ignore_errors=True)
    took = time.monotonic() - t0
    headline = str(info.value).splitlines()[0]
    assert re.match(
        r"job \d+ \(hang\) on node3, node4: ended CANCELLED( BY 0)? with 2 failed task\(s\): "
        r"task 0 on node3: .*(Timed out|timed out|Timeout|timeout).*; "
        r"task 1 on node4: no result \(still running 5 s after task 0 failed; cancelled\)$",
        headline,
    ), headline
    assert took < 60, f"{took:.0f} s"  # not the job's 2-minute limit

    def gone() -> bool:
        return not [r for r in slurm_cmd("squeue", "-h", "-o", "%i|%k").splitlines() if r.endswith("|" + tag)]

    wait_until("the cancelled job to leave the queue", gone, 15)

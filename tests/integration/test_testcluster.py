"""The test cluster behaves like a real multi-node GPU Slurm cluster.

These run real jobs through srun, sbatch and submitit; nothing is mocked.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import cloudpickle  # type: ignore[import-untyped]
import pytest
import submitit
from submitit.core.utils import UncompletedJobError

from gpucluster_testcluster import ClusterInfo, TestCluster
from pytest_gpucluster import slurm as slurm_api
from pytest_gpucluster.errors import LaunchError
from pytest_gpucluster.launch import JobSpec
from pytest_gpucluster.launch.slurm_backend import SlurmLauncher
from pytest_gpucluster.slurm import partition_nodes
from pytest_gpucluster.workloads.sleep import sleep

pytestmark = pytest.mark.integration

# pytest imports this file under a name the job's Python cannot import, so
# the job functions travel by value instead of by reference.
cloudpickle.register_pickle_by_value(sys.modules[__name__])

JOB_TIMEOUT_S = 60.0


# --- functions run inside jobs (module level, so they pickle) ---------------


def whoami() -> tuple[str, str]:
    import os
    import socket

    return socket.gethostname(), os.environ.get("SLURM_PROCID", "")


def gpu_slot(hold_s: float) -> dict[str, Any]:
    import os
    import socket
    import time

    start = time.time()
    time.sleep(hold_s)
    return {
        "host": socket.gethostname(),
        "job_gpus": os.environ.get("SLURM_JOB_GPUS", ""),
        "start": start,
        "end": time.time(),
    }


def sleep_long() -> None:
    import time

    time.sleep(600)


# --- helpers -------------------------------------------------------------------


def slurm(info: ClusterInfo, *argv: str, timeout: float = JOB_TIMEOUT_S) -> str:
    proc = subprocess.run(list(argv), env=info.env(), capture_output=True, text=True, timeout=timeout, check=False)
    assert proc.returncode == 0, f"{argv} failed: {proc.stderr}"
    return proc.stdout


def wait_done(job: submitit.Job[Any], timeout: float = JOB_TIMEOUT_S) -> None:
    """Bounded wait: job.results() alone would block forever on a stuck job."""
    deadline = time.monotonic() + timeout
    while not job.done():
        if time.monotonic() > deadline:
            job.cancel(check=False)
            pytest.fail(f"job {job.job_id} not done after {timeout:.0f}s (state {job.state})")
        time.sleep(0.2)


@pytest.fixture
def cluster(slurm_cluster: ClusterInfo, monkeypatch: pytest.MonkeyPatch) -> ClusterInfo:
    # submitit calls sbatch/sacct/scancel with the inherited environment.
    monkeypatch.setenv("SLURM_CONF", str(slurm_cluster.slurm_conf))
    return slurm_cluster


@pytest.fixture
def job_folder(slurm_cluster: ClusterInfo) -> Iterator[Path]:
    # Every node sees the shared dir; a fresh folder per test, because job ids
    # restart at 1 with a fresh cluster and an old result pickle would be read.
    folder = slurm_cluster.shared_dir / f"test-{uuid.uuid4().hex[:12]}"
    folder.mkdir()
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def executor(folder: Path, **params: Any) -> submitit.AutoExecutor:
    ex = submitit.AutoExecutor(folder=folder, cluster="slurm")
    # 5 min: submitit asks Slurm for its timeout signal 90 s before the limit; a 2-min limit would
    # signal a job that is merely slow to start on a loaded 2-core machine after 30 s.
    ex.update_parameters(slurm_partition="debug", timeout_min=5, **params)
    return ex


# --- tests -------------------------------------------------------------------------


def test_cluster_is_up_and_env_points_at_it(cluster: ClusterInfo) -> None:
    running = TestCluster.from_running(cluster.state_dir)
    assert running is not None
    assert running.is_up()
    assert running.env()["SLURM_CONF"] == str(cluster.slurm_conf)
    assert cluster.partition == "debug"
    assert cluster.shared_dir.stat().st_mode & 0o7777 == 0o1777


def test_srun_two_nodes_have_distinct_hostnames(cluster: ClusterInfo) -> None:
    out = slurm(cluster, "srun", "-N2", "hostname")
    names = out.split()
    assert len(names) == 2
    assert set(names) == set(cluster.nodes[:2])


def test_submitit_job_runs_on_two_hosts(cluster: ClusterInfo, job_folder: Path) -> None:
    job = executor(job_folder, nodes=2, tasks_per_node=1).submit(whoami)
    wait_done(job)
    results = job.results()
    assert len(results) == 2
    assert len({host for host, _ in results}) == 2
    assert sorted(rank for _, rank in results) == ["0", "1"]


def test_gpus_per_node_sets_cuda_visible_devices(cluster: ClusterInfo) -> None:
    out = slurm(cluster, "srun", "-N1", "--gpus-per-node=2", "printenv", "CUDA_VISIBLE_DEVICES")
    assert out.strip() == "0,1"


def test_concurrent_gpu_jobs_get_disjoint_gpus(cluster: ClusterInfo, job_folder: Path) -> None:
    node = cluster.nodes[0]
    ex = executor(
        job_folder, nodes=1, tasks_per_node=1, gpus_per_node=2, slurm_additional_parameters={"nodelist": node}
    )
    jobs = [ex.submit(gpu_slot, 4.0) for _ in range(2)]
    for job in jobs:
        wait_done(job)
    a, b = (job.result() for job in jobs)
    assert a["host"] == b["host"] == node
    # Both held their GPUs at the same time, so the split is real, not sequential.
    assert a["start"] < b["end"]
    assert b["start"] < a["end"]
    gpus_a, gpus_b = set(a["job_gpus"].split(",")), set(b["job_gpus"].split(","))
    assert len(gpus_a) == len(gpus_b) == 2
    assert not gpus_a & gpus_b


def test_scancel_makes_submitit_raise(cluster: ClusterInfo, job_folder: Path) -> None:
    job = executor(job_folder, nodes=1, tasks_per_node=1).submit(sleep_long)
    deadline = time.monotonic() + JOB_TIMEOUT_S
    while slurm(cluster, "squeue", "-h", "-j", job.job_id, "-o", "%T").strip() != "RUNNING":
        assert time.monotonic() < deadline, "job never started"
        time.sleep(0.2)
    slurm(cluster, "scancel", job.job_id)
    t0 = time.monotonic()
    wait_done(job, timeout=30.0)
    with pytest.raises(UncompletedJobError):
        job.results()
    assert time.monotonic() - t0 < 30.0


def test_sacct_shows_job(cluster: ClusterInfo) -> None:
    out = slurm(cluster, "sbatch", "--parsable", "-N1", "--output=/dev/null", "--wrap", "true")
    job_id = out.strip().split(";")[0]
    deadline = time.monotonic() + 30.0
    state = ""
    while time.monotonic() < deadline:
        lines = slurm(cluster, "sacct", "-j", job_id, "-X", "-n", "-P", "-o", "JobID,State").split()
        if lines and lines[0].split("|")[1] == "COMPLETED":
            state = "COMPLETED"
            break
        time.sleep(0.5)
    assert state == "COMPLETED", f"sacct never showed job {job_id} completed"


def test_restart_killed_slurmd(cluster: ClusterInfo) -> None:
    running = TestCluster.from_running(cluster.state_dir)
    assert running is not None
    node = cluster.nodes[-1]
    running.kill_slurmd(node)
    assert not running.is_up()
    running.start_slurmd(node)
    assert running.is_up()
    out = slurm(cluster, "srun", "-N1", "-w", node, "hostname")
    assert out.strip() == node


def _never_runs(ctx: object) -> None:
    raise AssertionError("a refused job never runs")


def test_a_job_no_node_can_hold_is_refused_naming_what_the_nodes_offer(cluster: ClusterInfo, job_folder: Path) -> None:
    launcher = SlurmLauncher(folder=job_folder, partition="debug")
    with pytest.raises(LaunchError) as refused:
        launcher.submit(_never_runs, JobSpec("toobig", nodes=1, gpus_per_node=cluster.gpus_per_node + 1))
    want = cluster.gpus_per_node + 1
    message = str(refused.value)
    assert message.startswith(
        "toobig: submission refused: sbatch: error: Batch job submission failed: Requested "
        "node configuration is not available"
    ), message
    assert f"; the job asked for 1 node(s) with {want} GPU(s) and 1 CPU(s) each; in partition debug: " in message
    assert f"node1 offers {cluster.gpus_per_node} GPU(s) (Gres=gpu:{cluster.gpus_per_node}) and 4 CPUs" in message
    assert launcher.live_job_ids() == []
    assert list(job_folder.iterdir()) == []  # nothing left behind


def test_a_job_slurm_will_never_start_is_cancelled_at_once_saying_why(cluster: ClusterInfo, job_folder: Path) -> None:
    # Every node, with more tasks than a node has CPUs and more in all than the partition has,
    # pends on PartitionConfig (sbatch refuses a job whose total would fit); a time limit past
    # the partition's MaxTime pends on PartitionTimeLimit.
    launcher = SlurmLauncher(folder=job_folder, partition="debug", queue_timeout_s=60)
    nodes = partition_nodes(slurm_api.Slurm(), "debug")
    wide = 1 + max(n.cpus for n in nodes)
    for spec, reason, hint in [
        (
            JobSpec("wide", nodes=len(nodes), tasks_per_node=wide, nodelist=tuple(n.name for n in nodes)),
            "PartitionConfig",
            f"and {wide} CPU(s) each; in partition debug: node1 offers",
        ),
        (JobSpec("long", nodes=1, timeout_min=24 * 60), "PartitionTimeLimit", "the job asked for 1440 min"),
    ]:
        t0 = time.monotonic()
        with pytest.raises(LaunchError) as err:
            launcher.run(_never_runs, spec)
        message = str(err.value)
        assert f"Slurm will not start it: PENDING, reason {reason} (" in message, message
        assert hint in message and "cancelled at once rather than waiting queue_timeout_s (60 s)" in message
        assert time.monotonic() - t0 < 20, message
    assert launcher.live_job_ids() == []


def test_jobs_waiting_at_once_share_one_queue_read(
    cluster: ClusterInfo, job_folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Four jobs that each need every node queue behind one another; the launcher asks the queue
    # for their states and reasons with one squeue for all, not one per job.
    calls: list[list[str]] = []
    real_run = slurm_api.commands._run_once

    def counted(argv: list[str], *args: Any, **kwargs: Any) -> str:
        calls.append(list(argv))
        return real_run(argv, *args, **kwargs)

    monkeypatch.setattr(slurm_api.commands, "_run_once", counted)
    launcher = SlurmLauncher(folder=job_folder, partition="debug", queue_timeout_s=120)
    nodes = tuple(n.name for n in partition_nodes(slurm_api.Slurm(), "debug"))
    jobs = [
        launcher.submit(sleep, JobSpec(f"queued{i}", nodes=len(nodes), nodelist=nodes, exclusive=True), seconds=2.0)
        for i in range(4)
    ]
    t0 = time.monotonic()
    with ThreadPoolExecutor(len(jobs)) as pool:
        results = list(pool.map(lambda job: job.results(), jobs))
    elapsed = time.monotonic() - t0
    assert [len(r) for r in results] == [len(nodes)] * 4
    # Jobs behind the first waited, and each saw why (Resources or Priority).
    assert sum(bool(job.pending_reason) for job in jobs) >= 2, [job.pending_reason for job in jobs]
    reads = [c for c in calls if c[0] == "squeue" and "-j" in c]
    # One shared read every 0.5 s at most (plus a job's own look-up when it left the queue
    # between reads); four jobs polling apart would be about four times that.
    assert len(reads) <= elapsed / 0.5 + 2 * len(jobs), (len(reads), elapsed)
    assert any("," in c[c.index("-j") + 1] for c in reads), reads[:5]
    assert launcher.live_job_ids() == []


def _slow_to_exit(ctx: object, hook_s: float, fail: bool) -> int:
    import atexit
    import os
    import time

    atexit.register(time.sleep, hook_s)  # stands in for torch's and CUDA's own teardown at exit
    if fail:
        raise RuntimeError("the workload failed on purpose")
    return os.getpid()


def _final_state(cluster: ClusterInfo, job_id: str, within_s: float) -> tuple[str, str]:
    """(State, ExitCode) once accounting shows the job ended, within ``within_s``."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < within_s:
        out = slurm(cluster, "sacct", "-j", job_id, "-X", "-n", "-P", "-o", "State,ExitCode").split()
        if out and out[0].split("|")[0] not in ("PENDING", "RUNNING", "COMPLETING"):
            state, code = out[0].split("|")
            return state, code
        time.sleep(0.25)
    pytest.fail(f"job {job_id} still not ended after {within_s:.0f} s (sacct: {out})")


def test_a_task_ends_once_its_result_is_written_with_the_workloads_exit_status(
    cluster: ClusterInfo, job_folder: Path
) -> None:
    launcher = SlurmLauncher(folder=job_folder, partition="debug")
    job = launcher.submit(_slow_to_exit, JobSpec("exits", nodes=1), hook_s=120.0, fail=False)
    assert job.results()[0].value > 0
    # Within 20 s, not after the 120 s exit hook: that hook never runs.
    assert _final_state(cluster, job.job_id, within_s=20.0) == ("COMPLETED", "0:0")
    failing = launcher.submit(_slow_to_exit, JobSpec("fails", nodes=1), hook_s=120.0, fail=True)
    with pytest.raises(LaunchError, match="the workload failed on purpose"):
        failing.results()
    assert _final_state(cluster, failing.job_id, within_s=20.0) == ("FAILED", "1:0")
    assert launcher.live_job_ids() == []


def _threads_and_blas(ctx: object) -> tuple[int, str | None, bool]:
    import os
    import sys
    from pathlib import Path

    threads = next(
        int(line.split()[1])
        for line in Path("/proc/self/status").read_text().splitlines()
        if line.startswith("Threads:")
    )
    return threads, os.environ.get("OPENBLAS_NUM_THREADS"), "numpy" in sys.modules


def test_tasks_start_without_a_blas_thread_per_core_unless_the_user_asked(
    cluster: ClusterInfo, job_folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    launcher = SlurmLauncher(folder=job_folder, partition="debug")
    # submitit's task entry has imported numpy by the time the workload runs; its OpenBLAS pool
    # would be a thread per core of the node.
    monkeypatch.delenv("OPENBLAS_NUM_THREADS", raising=False)
    threads, value, numpy_loaded = launcher.submit(_threads_and_blas, JobSpec("blas", nodes=1)).results()[0].value
    assert (threads, value, numpy_loaded) == (1, "1", True)
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "2")  # exported on the login node: kept
    threads, value, _ = launcher.submit(_threads_and_blas, JobSpec("blas", nodes=1)).results()[0].value
    assert value == "2" and threads >= 1
    assert launcher.live_job_ids() == []


def test_at_a_runs_end_jobs_whose_results_are_in_leave_the_queue_by_themselves(
    cluster: ClusterInfo, job_folder: Path
) -> None:
    launcher = SlurmLauncher(folder=job_folder, partition="debug")
    job = launcher.submit(_slow_to_exit, JobSpec("settles", nodes=2), hook_s=0.0, fail=False)
    assert len(job.results()) == 2  # read once written: the job may still be in the queue
    assert launcher.settle(limit_s=30.0) == []
    # It ended by itself: Slurm records it COMPLETED, not cancelled.
    assert _final_state(cluster, job.job_id, within_s=5.0) == ("COMPLETED", "0:0")
    # One that does not leave is handed back at the limit, for the caller to cancel.
    stuck = slurm(cluster, "sbatch", "--parsable", "-p", "debug", "-o", "/dev/null", "--wrap", "sleep 120").strip()
    try:
        launcher.watcher.note_ending(stuck)
        t0 = time.monotonic()
        assert launcher.settle(limit_s=1.0) == [stuck]
        assert time.monotonic() - t0 < 5.0
    finally:
        slurm(cluster, "scancel", stuck)

"""`down` leaves the machine as it found it, and `up` works again afterwards.

Slow-ish (a full teardown and bring-up); it restores the cluster it found, so
the session's other tests keep working.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from gpucluster_testcluster import ClusterInfo, TestCluster
from gpucluster_testcluster import config as tc_config
from pytest_gpucluster.errors import LaunchError
from pytest_gpucluster.launch import JobSpec
from pytest_gpucluster.launch.slurm_backend import SlurmLauncher
from pytest_gpucluster.workloads import rank_failure
from pytest_gpucluster.workloads.sleep import sleep

pytestmark = pytest.mark.integration


def processes_mentioning(needle: str) -> list[str]:
    """Live processes whose command line or environment names ``needle``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if (entry / "stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
                continue
            blob = (entry / "cmdline").read_bytes() + (entry / "environ").read_bytes()
        except OSError:
            continue
        if needle.encode() in blob:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            found.append(f"{entry.name}: {cmdline[:120]}")
    return found


def mounts_mentioning(needle: str) -> list[str]:
    """Mounts in any process's mount namespace whose mount point names ``needle``: the nodes'
    /dev/null over other nodes' GPU files live only as long as the node's processes."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            lines = (entry / "mountinfo").read_text().splitlines()
        except OSError:
            continue
        found += [f"{entry.name}: {line}" for line in lines if needle in line.split()[4]]
    return found


def test_down_cleans_up_and_up_restores(slurm_cluster: ClusterInfo) -> None:
    running = TestCluster.from_running(slurm_cluster.state_dir)
    assert running is not None
    state_dir = slurm_cluster.state_dir

    t0 = time.monotonic()
    running.down()
    down_s = time.monotonic() - t0

    assert processes_mentioning(str(state_dir)) == []
    assert mounts_mentioning(str(state_dir)) == []
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, timeout=10, check=True).stdout
    for node in slurm_cluster.nodes:
        assert node not in netns.split()
        assert not Path("/sys/class/net", tc_config.veth_name(node)).exists()
    assert not Path("/sys/class/net", tc_config.BRIDGE).exists()
    assert "gpucluster-testcluster" not in Path("/etc/hosts").read_text()
    assert not state_dir.exists()
    assert not running.is_up()

    # Repeating down is harmless.
    running.down()

    t0 = time.monotonic()
    info = running.up()
    up_s = time.monotonic() - t0
    assert running.is_up()
    out = subprocess.run(
        ["srun", "-N2", "hostname"], env=info.env(), capture_output=True, text=True, timeout=60, check=True
    ).stdout
    assert set(out.split()) == set(slurm_cluster.nodes[:2])
    # Each node's mount namespace covers the other nodes' GPU files, and only those.
    assert mounts_mentioning(str(state_dir / "dev")) != []
    print(f"down {down_s:.1f}s, up {up_s:.1f}s")


def test_host_network_cluster_without_accounting_runs_jobs_and_reports_a_dead_task(
    slurm_cluster: ClusterInfo, tmp_path: Path
) -> None:
    # How the GPU test machine runs it when it cannot make namespaces: every node on 127.0.0.1, and
    # no slurmdbd, so the launcher follows jobs through squeue and the controller's memory alone.
    running = TestCluster.from_running(slurm_cluster.state_dir)
    assert running is not None
    running.down()
    plain = TestCluster(nodes=2, gpus_per_node=4, accounting=False, network="host", install=False)
    try:
        info = plain.up()
        out = subprocess.run(
            ["srun", "-N2", "hostname"], env=info.env(), capture_output=True, text=True, timeout=60, check=True
        ).stdout
        assert sorted(out.split()) == ["node1", "node2"]
        sacct = subprocess.run(["sacct", "-X", "-n"], env=info.env(), capture_output=True, text=True, timeout=30)
        assert sacct.returncode != 0  # really no accounting

        os.environ["SLURM_CONF"] = str(info.slurm_conf)
        folder = info.shared_dir / f"hostnet-{os.getpid()}-{time.monotonic_ns()}"
        launcher = SlurmLauncher(folder=folder, partition="debug")
        t0 = time.monotonic()
        stamps = rank_failure.new_stamp_dir(folder)
        with pytest.raises(LaunchError) as failed:  # rank 1 exits with 17 after a gloo barrier
            launcher.run(
                rank_failure.rank_failure,
                JobSpec("dies", nodes=1, tasks_per_node=2, timeout_min=5),
                stamp_dir=str(stamps),
            )
        took = time.monotonic() - t0
        # The dead task is what the launcher must name. The job's own state is Slurm's word: without
        # accounting the controller may hold COMPLETED or FAILED for it, depending on when it was asked.
        said = str(failed.value)
        assert re.search(r" ended (FAILED|COMPLETED) with 1 failed task\(s\): task 1 on node1: no result", said), said
        assert took < 20, f"took {took:.1f} s"
    finally:
        os.environ["SLURM_CONF"] = str(slurm_cluster.slurm_conf)
        plain.down()
        running.up()
    assert running.is_up()


def test_a_job_id_a_fresh_controller_gives_again_is_read_as_the_new_job(
    slurm_cluster: ClusterInfo, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A controller started on fresh state numbers jobs from 1 again, as the test cluster does each
    # time it is brought up. A launcher of a later run, in the same process, follows its own jobs:
    # the earlier job that had the same id and was cancelled does not end the new one in the queue.
    monkeypatch.setenv("SLURM_CONF", str(slurm_cluster.slurm_conf))
    running = TestCluster.from_running(slurm_cluster.state_dir)
    assert running is not None
    folder = slurm_cluster.shared_dir / f"reused-id-{uuid.uuid4().hex[:8]}"
    ids = []
    try:
        running.down()
        running.up()  # fresh state: the next job is the first one
        first = SlurmLauncher(folder=folder / "first", partition="debug")
        cancelled = first.submit(sleep, JobSpec("cancelled", nodes=1), seconds=300.0)
        subprocess.run(["scancel", cancelled.job_id], env=slurm_cluster.env(), timeout=30, check=True)
        with pytest.raises(LaunchError, match=r"ended CANCELLED"):
            cancelled.results()
        ids.append(cancelled.job_id)

        running.down()
        running.up()
        second = SlurmLauncher(folder=folder / "second", partition="debug")
        again = second.submit(sleep, JobSpec("again", nodes=1), seconds=1.0)
        ids.append(again.job_id)
        assert again.job_id == cancelled.job_id, ids  # the same id, from the fresh controller
        assert [r.value.seconds >= 1.0 for r in again.results()] == [True]
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    assert running.is_up()

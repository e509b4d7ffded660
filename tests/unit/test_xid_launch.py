"""Xid watches travel with task results through submitit's local executor (real processes on this
machine): a task given GPUs returns its watch, a task whose workload raised leaves it beside its
result, and a task without GPUs does not watch."""

from __future__ import annotations

import pytest

from pytest_gpucluster.errors import LaunchError
from pytest_gpucluster.launch import JobSpec
from pytest_gpucluster.launch.local_backend import LocalLauncher
from pytest_gpucluster.workloads.sleep import sleep
from pytest_gpucluster.workloads.xid import XidWatch


@pytest.fixture
def launcher(tmp_path):
    return LocalLauncher(folder=tmp_path, queue_timeout_s=60, poll_s=0.05)


def test_a_task_given_gpus_returns_its_watch_and_the_launcher_keeps_it(launcher):
    job = launcher.submit(sleep, JobSpec(name="watched", gpus_per_node=1, timeout_min=2), seconds=0.2)
    (result,) = job.results()
    assert isinstance(result.xid, XidWatch)
    assert result.xid.job_id == job.job_id and result.xid.rank == 0
    assert result.xid.started <= result.started and result.xid.ended >= result.ended
    # On a machine without NVML the watch says why it watched nothing; on one with GPUs it watched them.
    assert result.xid.gpus or result.xid.error
    assert launcher.xid_watches == {(job.job_id, 0): result.xid}


def test_a_task_whose_workload_raised_still_reports_its_watch(launcher):
    job = launcher.submit(sleep, JobSpec(name="raised", gpus_per_node=1, timeout_min=2), no_such_argument=1)
    with pytest.raises(LaunchError, match="no_such_argument"):
        job.results()
    watch = launcher.xid_watches[(job.job_id, 0)]
    assert watch.job_id == job.job_id and watch.ended >= watch.started > 0


def test_a_task_without_gpus_does_not_watch(launcher):
    job = launcher.submit(sleep, JobSpec(name="cpu", timeout_min=2), seconds=0.0)
    (result,) = job.results()
    assert result.xid is None and launcher.xid_watches == {}

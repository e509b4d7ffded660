"""The launcher through submitit's local executor (real processes on this machine)."""

from __future__ import annotations

import pytest

from pytest_gpucluster.launch import JobSpec
from pytest_gpucluster.launch.local_backend import LocalLauncher
from pytest_gpucluster.workloads.isolation import gpu_view


@pytest.fixture
def launcher(tmp_path):
    return LocalLauncher(folder=tmp_path, queue_timeout_s=60, poll_s=0.05)


def test_results_return_once_the_jobs_processes_have_ended(launcher, recwarn):
    job = launcher.submit(gpu_view, JobSpec(name="ends", nodes=1, tasks_per_node=2, timeout_min=2), real=False)
    views = [r.value for r in job.results()]
    assert sorted(v.rank for v in views) == [0, 1]
    # The job's controller process has ended and been reaped: nothing of it shares the machine
    # with the next job, and no "subprocess is still running" ResourceWarning follows.
    assert job._job._process.returncode == 0
    del job
    assert not [w for w in recwarn if issubclass(w.category, ResourceWarning)]


def test_a_local_run_asks_slurm_nothing(launcher, tmp_path, monkeypatch):
    # No Slurm command can be found: the job still runs, ends and settles, since the local
    # launcher's watcher keeps its jobs and lost nodes without a client of Slurm.
    empty = tmp_path / "no-slurm-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    job = launcher.submit(gpu_view, JobSpec(name="alone", nodes=1, tasks_per_node=1, timeout_min=2), real=False)
    assert [r.value.rank for r in job.results()] == [0]
    assert launcher.settle() == []
    assert launcher.live_job_ids() == []
    assert not hasattr(launcher.watcher, "client")

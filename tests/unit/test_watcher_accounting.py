"""Each launcher's watcher reads accounting for its own jobs: a final state it read is not what a
later launcher's job with the same id reads. A controller started on fresh state numbers jobs from 1
again (the test cluster, each time it comes up), and submitit's one sacct watcher per process keeps a
job's final state under its id for good. sacct here is a script printing what Slurm 22.05 prints."""

from __future__ import annotations

import pytest
import submitit

from pytest_gpucluster.launch.watcher import SlurmWatcher


def _sacct_says(bin_dir, line: str) -> None:
    bin_dir.mkdir(exist_ok=True)
    script = bin_dir / "sacct"
    script.write_text(f"#!/bin/sh\nprintf 'JobID|State|NodeList\\n{line}\\n'\n")
    script.chmod(0o755)


@pytest.fixture
def bin_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    return tmp_path / "bin"


def test_a_job_id_given_again_is_read_anew_by_a_later_launcher(tmp_path, bin_dir):
    job = submitit.SlurmJob(folder=tmp_path, job_id="1")
    _sacct_says(bin_dir, "1|CANCELLED by 0|node1")
    earlier = SlurmWatcher()
    assert earlier.job_state(job, force=True) == "CANCELLED BY 0"
    assert earlier.sacct_done(job)

    _sacct_says(bin_dir, "1|PENDING|None assigned")  # the fresh controller's job 1
    later = SlurmWatcher()
    assert later.job_state(submitit.SlurmJob(folder=tmp_path, job_id="1"), force=True) == "PENDING"
    assert not later.sacct_done(job)
    # The earlier launcher keeps what it read of its own job, which has ended.
    assert earlier.job_state(job, force=True) == "CANCELLED BY 0"

"""The caller's Slurm environment (slurm/caller_env.py): a run of a Slurm profile started inside a
Slurm allocation stops before any job; the caller's SBATCH_*/SRUN_*/SLURM_* variables are set
aside for the run (its tests, jobs and Slurm commands see none of them, SLURM_CONF stays),
recorded in the results, named in one warning when they would have changed the jobs, and given
back when the run ends."""

from __future__ import annotations

import json
import os

import pytest

PROFILE = """
[profiles.site]
executor = "slurm"
partition = "gpu"
nodes = 1
gpus_per_node = 0
gpus_are_real = false
shared_fs = "{shared}"
slurm_retry_s = 0
thresholds = "cpu"
"""

# No check: a plain test that reports what the run's process environment holds while it runs.
SEES = """
import os

def test_what_the_run_sees():
    seen = {k: os.environ.get(k) for k in ("SBATCH_TIMELIMIT", "SBATCH_JOB_NAME", "SQUEUE_STATES", "SLURM_CONF")}
    assert seen == {"SBATCH_TIMELIMIT": None, "SBATCH_JOB_NAME": None, "SQUEUE_STATES": None, "SLURM_CONF": "/etc/x"}
"""


@pytest.fixture
def site(gpc: pytest.Pytester) -> pytest.Pytester:
    text = (gpc.path / "thresholds.toml").read_text() + PROFILE.format(shared=gpc.path)
    (gpc.path / "thresholds.toml").write_text(text)
    gpc.makepyfile(test_sees=SEES)
    return gpc


def test_a_run_inside_an_allocation_stops_before_any_job(site, monkeypatch):
    monkeypatch.setenv("SLURM_JOB_ID", "77")
    result = site.runpytest_subprocess("--cluster=site")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    err = result.stderr.str()
    assert "SLURM_JOB_ID=77: this run is inside Slurm allocation 77" in err
    assert "Run pytest from a shell outside any allocation" in err


def test_the_local_executor_runs_inside_an_allocation(site, monkeypatch):
    monkeypatch.setenv("SLURM_JOB_ID", "77")
    site.makepyfile(test_sees="def test_fine():\n    pass\n")
    assert site.runpytest_subprocess("--cluster=local").ret == 0


def test_the_callers_slurm_variables_are_set_aside_recorded_named_and_given_back(site, monkeypatch):
    monkeypatch.setenv("SBATCH_TIMELIMIT", "1")
    monkeypatch.setenv("SBATCH_JOB_NAME", "x")
    monkeypatch.setenv("SQUEUE_STATES", "RUNNING")
    monkeypatch.setenv("SLURM_CONF", "/etc/x")
    monkeypatch.setenv("PATH", str(site.path))  # no Slurm client here: Slurm is not asked
    result = site.runpytest("--cluster=site", "--gpucluster-results=results.json")
    result.assert_outcomes(passed=1)
    out = result.stdout.str()
    assert (
        "[gpucluster] warning: the caller's SBATCH_JOB_NAME='x', SBATCH_TIMELIMIT='1' would have changed "
        "every job of this run" in out
    )
    assert "SQUEUE_STATES" not in out  # it changes what squeue lists, not a job
    env = json.loads((site.path / "results.json").read_text())["environment"]
    assert env["caller_slurm_env"] == {"SBATCH_JOB_NAME": "x", "SBATCH_TIMELIMIT": "1", "SQUEUE_STATES": "RUNNING"}
    assert os.environ["SBATCH_TIMELIMIT"] == "1" and os.environ["SQUEUE_STATES"] == "RUNNING"

"""Hostile and broken input, through a real pytest process against the test cluster: config
values never reach a shell; nonsense in thresholds.toml stops the run at load time (exit 4, no
job submitted); a shared filesystem that is missing, read-only or full gives a clear failure and
leaves nothing behind."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from faults_support import REPO, SHARED, fault_profile, run_pytest

pytestmark = pytest.mark.integration

PLACEMENT = "tests/acceptance/test_placement.py::test_task_placement[1node-1task]"
SHAREDFS = "tests/acceptance/test_sharedfs.py::test_capacity_and_free_space"


def markers(name: str, *also: Path) -> list[Path]:
    """Every place a ``touch NAME`` run by a shell could have put its file."""
    places = [REPO, Path(SHARED), Path("/tmp"), Path.home(), Path("/"), *also]
    return [p / name for p in places if (p / name).exists()]


def test_config_values_never_reach_a_shell(slurm_cluster, tmp_path):
    mark = f"pwned-{os.getpid()}"
    odd_dir = Path(SHARED) / f"faults dir $(touch {mark}) `touch {mark}` ;touch {mark}"
    odd_dir.mkdir()
    try:
        profile = fault_profile(
            tmp_path,
            shared_fs=str(odd_dir),
            sbatch_extra={"mail-user": f"x$(touch {mark})y;touch {mark}"},
            env={"GPUCLUSTER_EVIL": f"$(touch {mark}); `touch {mark}`"},
        )
        run = run_pytest(profile, tmp_path, PLACEMENT, SHAREDFS, timeout=180)
    finally:
        profile.cancel_all()
        leftovers = sorted(p.name for p in odd_dir.iterdir())
        probes = list(odd_dir.glob(".pytest-gpucluster/*/sharedfs-*"))
        subprocess.run(["rm", "-rf", "--", str(odd_dir)], check=True, timeout=30)
    assert markers(mark, odd_dir, tmp_path) == []
    # The values were taken as data: the jobs ran, in the folder with the odd name.
    assert run.test("1node-1task")["outcome"] == "passed", run.output[-4000:]
    assert run.test("test_capacity_and_free_space")["outcome"] == "passed", run.output[-4000:]
    assert run.returncode == 0
    assert leftovers == [".pytest-gpucluster"] and probes == []  # job files only; the probe directory was removed
    assert profile.jobs() == []


BAD = {
    "nan": (
        '"gpu.temperature" = { unit = "C", fail_above = nan }',
        "thresholds.hostile.gpu.temperature.fail_above: must be a finite number, got nan.",
    ),
    "negative": (
        '"gpu.temperature" = { unit = "C", fail_above = -5 }',
        "thresholds.hostile.gpu.temperature.fail_above: must not be negative, got -5.",
    ),
    "inf": (
        '"sharedfs.free" = { unit = "GiB", fail_below = inf }',
        "thresholds.hostile.sharedfs.free.fail_below: must be a finite number, got inf.",
    ),
    "wrong unit": (
        '"sharedfs.free" = { unit = "MB", fail_below = 1 }',
        "thresholds.hostile.sharedfs.free.unit: 'MB' is not the unit of sharedfs.free; write unit = \"GiB\".",
    ),
    "unknown metric": (
        '"gpu.temprature" = { unit = "C", fail_above = 85 }',
        "thresholds.hostile.gpu.temprature: 'gpu.temprature' is not a known metric. "
        "Perhaps you meant 'gpu.temperature'?",
    ),
}

BAD_PROFILE = {
    "partition": (
        {"partition": "gpu; touch MARK"},
        "profiles.faults.partition: 'gpu; touch MARK' is not a Slurm name (letters, digits, '_', '.', '-' only).",
    ),
    "account": (
        {"account": "$(touch MARK)"},
        "profiles.faults.account: '$(touch MARK)' is not a Slurm name (letters, digits, '_', '.', '-' only).",
    ),
    "nodelist": (
        {"nodelist": ["node3", "node4;touch MARK"]},
        "profiles.faults.nodelist: 'node4;touch MARK' is not a Slurm node name.",
    ),
    "sbatch_extra key": (
        {"sbatch_extra": {"wrap=touch MARK;x": "1"}},
        "profiles.faults.sbatch_extra.wrap=touch MARK;x: expected a long sbatch option name and a one-line value.",
    ),
    "sbatch_extra newline": (
        {"sbatch_extra": {"comment": "x\ntouch MARK"}},
        "profiles.faults.sbatch_extra.comment: expected a long sbatch option name and a one-line value.",
    ),
    "env name": (
        {"env": {"A=$(touch MARK)": "1"}},
        "profiles.faults.env.A=$(touch MARK): expected an environment variable name and a one-line value.",
    ),
}


def _refused(run, message: str, profile) -> None:
    assert run.returncode == 4, run.output  # pytest's usage error: nothing collected, nothing run
    assert f"ERROR: {profile.path}: {message}" in run.output, run.output
    assert profile.jobs() == []
    assert run.results == {}  # no results file: the run never started
    assert markers("MARK") == []


@pytest.mark.parametrize("case", list(BAD))
def test_nonsense_thresholds_stop_the_run_before_any_job(slurm_cluster, tmp_path, case):
    line, message = BAD[case]
    profile = fault_profile(tmp_path, thresholds="hostile", extra_text=f"[thresholds.hostile]\n{line}\n")
    _refused(run_pytest(profile, tmp_path, PLACEMENT, timeout=60), message, profile)


@pytest.mark.parametrize("case", list(BAD_PROFILE))
def test_shell_syntax_in_the_profile_is_refused_at_load(slurm_cluster, tmp_path, case):
    overrides, message = BAD_PROFILE[case]
    profile = fault_profile(tmp_path, **overrides)
    _refused(run_pytest(profile, tmp_path, PLACEMENT, timeout=60), message, profile)


@pytest.fixture
def broken_shared(tmp_path, request):
    """A shared_fs path in one of three broken states; yields (path, expected message part)."""
    kind = request.param
    path = Path(SHARED) / f"faults-{kind}-{os.getpid()}-{tmp_path.name[-8:]}"
    mounted = False
    try:
        if kind == "missing":
            yield path, f"shared_fs '{path}' of profile 'faults' is not a directory on this login node"
        else:
            path.mkdir()
            if kind == "read-only":
                subprocess.run(["mount", "--bind", str(path), str(path)], check=True, timeout=30)
                mounted = True
                subprocess.run(["mount", "-o", "remount,bind,ro", str(path)], check=True, timeout=30)
                yield path, "Read-only file system"
            else:
                subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(path)], check=True, timeout=30)
                mounted = True
                with open(path / "filler", "wb") as f:
                    try:
                        while True:
                            f.write(b"\0" * 65536)
                            f.flush()
                    except OSError:
                        pass
                (path / "filler").chmod(0o444)
                yield path, "No space left on device"
    finally:
        if mounted:
            subprocess.run(["umount", str(path)], check=False, timeout=30)
        if path.exists():
            subprocess.run(["rm", "-rf", "--", str(path)], check=False, timeout=30)


@pytest.mark.parametrize("broken_shared", ["missing", "read-only", "full"], indirect=True)
def test_a_broken_shared_filesystem_fails_clearly_and_leaves_nothing(slurm_cluster, tmp_path, broken_shared):
    path, expected = broken_shared
    before = sorted(os.listdir(path)) if path.exists() else None
    profile = fault_profile(tmp_path, shared_fs=str(path))
    run = run_pytest(profile, tmp_path, PLACEMENT, timeout=120)
    test = run.test("1node-1task")
    # raised where the test reads the job's value: not judged, and pytest counts it so
    assert (test["outcome"], test["verdict"]) == ("skipped", "fault"), run.output[-3000:]
    assert expected in test["message"], test["message"]
    assert str(path) in test["message"]
    assert run.returncode == 10  # INCOMPLETE: a fault outside the nodes, no node judged
    assert (sorted(os.listdir(path)) if path.exists() else None) == before  # nothing created, nothing left
    assert profile.jobs() == []


def test_collective_size_larger_than_gpu_memory_is_refused_before_launch(slurm_cluster, tmp_path):
    profile = fault_profile(
        tmp_path,
        gpus_are_real=True,
        gpu_model="NVIDIA H100 80GB HBM3",
        extra_text='[profiles.faults.nccl]\nmax_bytes = "64GiB"\n',
    )
    run = run_pytest(profile, tmp_path, "tests/acceptance/test_nccl.py", "-k", "inside_node", timeout=120)
    assert run.returncode == 1
    assert (
        "[profiles.faults.nccl] max_bytes = 68719476736 (3 buffers of that size on each NVIDIA H100 80GB HBM3): "
        "needs 192.00 GiB per GPU but a GPU has 79.65 GiB"
    ) in run.output
    assert run.results["tests"] and all(not t["job_ids"] for t in run.results["tests"])
    assert profile.jobs() == []

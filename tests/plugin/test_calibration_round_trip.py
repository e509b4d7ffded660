"""The calibration round trip on the project's own acceptance suite (``--cluster=local``): three
clean runs calibrate, and a further clean run gated by that set is ACCEPTED. Sanity bounds
(free space, teardown time, memory spread) keep the shipped lines; every calibrated bound carries
its source into the results."""

from __future__ import annotations

import json
import shutil
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
# The acceptance files that measure on this machine; the others only find nothing to judge here
# (no GPU, no InfiniBand, no Slurm) and add nothing to a calibration.
MEASURING = ("test_compute.py", "test_nccl.py", "test_training.py", "test_rank_failure.py", "test_sharedfs.py")


@pytest.fixture
def suite(gpc: pytest.Pytester) -> pytest.Pytester:
    (gpc.path / "acceptance").mkdir()
    for name in MEASURING:
        shutil.copy(REPO / "tests" / "acceptance" / name, gpc.path / "acceptance" / name)
    return gpc


def _run(suite: pytest.Pytester, results: str, *args: str) -> dict:
    result = suite.runpytest_subprocess(
        "acceptance", "-m", "not slow", "--cluster=local", f"--gpucluster-results={results}", *args
    )
    doc = json.loads((suite.path / results).read_text())
    assert doc["acceptance"]["verdict"] == "ACCEPTED", result.stdout.str()[-4000:]
    assert result.ret == 0
    return doc


# Calibrated lines follow this machine's CPU speed: a second xdist worker beside the gated runs
# halves a CPU rank's GEMM rate and fails the line the quiet runs set.
@pytest.mark.serial
def test_three_runs_calibrate_and_the_next_is_accepted(suite):
    _run(suite, "r1.json")
    _run(suite, "r2.json")
    _run(
        suite,
        "r3.json",
        "--gpucluster-calibrate=cal.toml",
        "--gpucluster-calibrate-from=r1.json",
        "--gpucluster-calibrate-from=r2.json",
    )
    fragment = (suite.path / "cal.toml").read_text()
    table = tomllib.loads(fragment)["thresholds"]["calibrated-local"]
    calibrated = {k for k in table if k not in ("match", "extends")}
    assert {"compute.matmul_bf16", "nccl.all_reduce.intra_node", "train.ddp.tokens_per_s_per_gpu"} <= calibrated
    assert not calibrated & {"sharedfs.free", "sharedfs.capacity", "robustness.rank_failure_teardown"}
    assert all(table[k]["source"].startswith("calibrated from 3 run(s)") for k in calibrated)

    combined = (suite.path / "thresholds.toml").read_text() + "\n" + fragment
    combined = combined.replace("[profiles.local]\n", '[profiles.local]\nthresholds = "calibrated-local"\n', 1)
    (suite.path / "gated.toml").write_text(combined)
    doc = _run(suite, "gated.json", "--gpucluster-thresholds=gated.toml")
    judged = {m["metric"]: m["threshold"] for t in doc["tests"] for m in t["measurements"]}
    assert judged["compute.matmul_bf16"]["evidence"].startswith("calibrated from 3 run(s)")
    # a line the calibrated set does not write is default's, read through the set in force
    free = judged["sharedfs.free"]
    assert free["source"].endswith("[thresholds.calibrated-local.sharedfs.free] (inherited from [thresholds.default])")
    assert free["defined_in"] == "default"


def test_calibrate_from_without_calibrate_is_a_usage_error(suite):
    result = suite.runpytest_subprocess("acceptance", "--gpucluster-calibrate-from=r1.json")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*--gpucluster-calibrate-from=r1.json: says what to calibrate from; add --gpucluster-calibrate=PATH*"]
    )


def test_missing_calibration_input_is_a_usage_error(suite):
    result = suite.runpytest_subprocess(
        "acceptance", "--gpucluster-calibrate=c.toml", "--gpucluster-calibrate-from=gone.json"
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*--gpucluster-calibrate-from=*gone.json: cannot be read (No such file or directory).*"]
    )


def test_an_unwritable_calibration_path_is_named(gpc):
    gpc.makepyfile(test_x="def test_x():\n    pass\n")
    (gpc.path / "taken").write_text("a file, not a folder")
    result = gpc.runpytest_subprocess("--gpucluster-calibrate=taken/c.toml")
    # Refused before the run, not found out after it: nothing measured is lost.
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: --gpucluster-calibrate=taken/c.toml: */taken is not a folder; name a file*"])

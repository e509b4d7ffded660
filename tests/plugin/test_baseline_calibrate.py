"""--gpucluster-baseline and --gpucluster-calibrate through real runs: a regression fails the run as one more test;
the calibrated fragment loads back into thresholds.toml and passes the run it came from."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import pytest

from pytest_gpucluster.config import load
from pytest_gpucluster.verdict import Measurement, judge

SUITE = """
from pytest_gpucluster.verdict import Measurement

def test_speed(judge):
    judge.all([Measurement("compute.fraction_of_node_median", v, "ratio", where=f"node1:gpu{g}")
               for g, v in enumerate(VALUES)])

def test_temperature(judge):
    judge(Measurement("gpu.temperature", TEMP, "C", where="node1:gpu0"))
"""


SPEED = """
from pytest_gpucluster.verdict import Measurement

def test_matmul(judge):
    judge.all([Measurement("compute.matmul_bf16", v, "TFLOP/s", where=f"node1:gpu{g}")
               for g, v in enumerate([98.0, 100.0, 102.0])])
"""


def _suite(values: list[float], temp: float = 40.0) -> str:
    return SUITE.replace("VALUES", repr(values)).replace("TEMP", repr(temp))


@pytest.fixture
def baseline(gpc):
    gpc.makepyfile(test_cluster=_suite([0.95, 0.96, 0.97, 0.98]))
    assert gpc.runpytest_subprocess("--gpucluster-results=base.json").ret == 0
    return gpc.path / "base.json"


def test_regression_past_the_fail_line_fails_the_run(gpc, baseline):
    # gpu3: 0.98 → 0.80 is a 18 % drop (fail above 10 %); gpu2: 0.97 → 0.91 is 6 % (warn above 5 %)
    gpc.makepyfile(test_cluster=_suite([0.95, 0.96, 0.91, 0.80]))
    result = gpc.runpytest_subprocess(
        "--gpucluster-baseline=base.json", "--gpucluster-results=now.json", "--junitxml=j.xml", "--html=r.html"
    )
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines(
        [
            "*baseline *base.json: 5 compared, 1 regression(s) past the fail line, 1 past the warn line",
            "*fail: node1:gpu3: baseline.regression (compute.fraction_of_node_median: 0.98 → 0.8 ratio) = 18.37 % "
            "is above the fail line 10 %*",
            "FAILED baseline::test_no_regression_against_baseline*",
        ]
    )
    doc = json.loads((gpc.path / "now.json").read_text())
    synthetic = doc["tests"][-1]
    assert synthetic["nodeid"] == "baseline::test_no_regression_against_baseline" and synthetic["verdict"] == "fail"
    statuses = {(c["where"], c["status"]) for c in doc["baseline"]["changes"]}
    assert {("node1:gpu3", "fail"), ("node1:gpu2", "warn"), ("node1:gpu0", "pass")} <= statuses
    assert doc["acceptance"]["verdict"] == "REJECTED"
    cases = {c.get("name"): c for c in ET.parse(gpc.path / "j.xml").getroot().iter("testcase")}
    assert cases["test_no_regression_against_baseline"].find("failure") is not None
    html = (gpc.path / "r.html").read_text()
    assert 'id="gc-baseline"' in html and "+18.4 %" in html


def test_regression_in_the_warn_band_passes_with_a_warning(gpc, baseline):
    gpc.makepyfile(test_cluster=_suite([0.95, 0.96, 0.91, 0.98]))
    result = gpc.runpytest_subprocess("--gpucluster-baseline=base.json", "--gpucluster-results=now.json")
    assert result.ret == 0
    doc = json.loads((gpc.path / "now.json").read_text())
    assert doc["tests"][-1]["verdict"] == "warn" and doc["acceptance"]["verdict"] == "ACCEPTED"


def test_baseline_from_another_environment_is_warned_about(gpc, baseline):
    doc = json.loads(baseline.read_text())
    doc["cluster"]["gpu_model"] = "NVIDIA H100 80GB HBM3"
    baseline.write_text(json.dumps(doc))
    result = gpc.runpytest_subprocess("--gpucluster-baseline=base.json")
    assert result.ret == 0
    result.stdout.fnmatch_lines(
        [
            "*BaselineWarning: --gpucluster-baseline=*base.json was measured on a different environment: "
            "GPU model: NVIDIA H100 80GB HBM3 (baseline) → cpu (this run)*"
        ]
    )


def test_unreadable_baseline_is_a_usage_error(gpc):
    gpc.makepyfile(test_cluster=_suite([0.95]))
    (gpc.path / "bad.json").write_text('{"schema_version": 99, "tests": []}')
    result = gpc.runpytest_subprocess("--gpucluster-baseline=bad.json")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*--gpucluster-baseline=bad.json: *bad.json: results schema_version 99; this plugin reads versions 1 and 2."]
    )


def test_calibrated_fragment_loads_back_and_passes_its_own_run(gpc):
    values = [0.95, 0.96, 0.97, 0.98]
    gpc.makepyfile(test_cluster=_suite(values, temp=50.0), test_speed=SPEED)
    result = gpc.runpytest_subprocess(
        "--gpucluster-calibrate=cal.toml", "--gpucluster-calibrate-fail=0.8", "--gpucluster-calibrate-warn=0.9"
    )
    assert result.ret == 0
    result.stdout.fnmatch_lines(["calibrated thresholds written to *cal.toml"])
    fragment = (gpc.path / "cal.toml").read_text()
    assert '[thresholds."calibrated-local"]\nmatch = ["cpu"]\nextends = "cpu"\n' in fragment
    combined = gpc.path / "combined.toml"
    combined.write_text((gpc.path / "thresholds.toml").read_text() + "\n" + fragment)
    config = load(combined)
    t = config.threshold_sets["calibrated-local"]
    # one run: the floor sets the lines (0.8 and 0.9 × the median 100)
    speed = t["compute.matmul_bf16"]
    assert (speed.fail_below, speed.warn_below) == (pytest.approx(80), pytest.approx(90))
    assert speed.origin == "calibration"
    # a ratio and a temperature are sanity bounds: they keep the cpu and default sets' lines
    assert t["compute.fraction_of_node_median"].fail_below == 0.3 and "gpu.temperature" not in t
    assert "nccl.all_reduce.intra_node" in t  # what was not measured keeps the cpu set's bound
    for v in (98.0, 100.0, 102.0):
        assert judge(Measurement("compute.matmul_bf16", v, "TFLOP/s"), speed).status == "pass"
    # and the suite passes against its own calibration when a profile selects the set
    text = combined.read_text().replace("[profiles.local]\n", '[profiles.local]\nthresholds = "calibrated-local"\n', 1)
    combined.write_text(text)
    assert gpc.runpytest_subprocess("--gpucluster-thresholds=combined.toml").ret == 0


def test_bad_calibration_fractions_are_a_usage_error(gpc):
    gpc.makepyfile(test_cluster=_suite([0.95]))
    result = gpc.runpytest_subprocess(
        "--gpucluster-calibrate=c.toml", "--gpucluster-calibrate-fail=0.97", "--gpucluster-calibrate-warn=0.9"
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*--gpucluster-calibrate-fail=0.97 and --gpucluster-calibrate-warn=0.9: need 0 < fail ≤ warn ≤ 1*"]
    )

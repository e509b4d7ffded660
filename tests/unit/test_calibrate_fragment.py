"""--calibrate's fragment: bounds from the worst value, mirrored for lower-is-better, valid TOML."""

from __future__ import annotations

import tomllib

import pytest

from pytest_gpucluster.calibrate import Fractions, calibrate, set_name_for
from pytest_gpucluster.errors import ConfigError


def _doc(*values):
    ms = [{"metric": m, "value": v, "unit": u, "status": s} for m, v, u, s in values]
    return {"status": "complete", "profile": "nebius", "nodes": ["n1"], "tests": [{"measurements": ms}]}


def test_fragment_is_valid_toml_with_bounds_below_the_worst_value():
    text = calibrate(
        _doc(
            ("compute.matmul_bf16", 700.0, "TFLOP/s", "pass"),
            ("compute.matmul_bf16", 650.0, "TFLOP/s", "pass"),
            ("gpu.ecc_volatile_uncorrectable", 0, "count", "pass"),
            ("compute.memcopy", 0.00002, "TB/s", "pass"),
            ("baseline.regression", 3.0, "%", "pass"),
            ("gpu.temperature", 40.0, "F", "fail"),
        ),
        set_name="calibrated-nebius",
        match="NVIDIA H100 80GB HBM3",
        extends="nebius",
    )
    table = tomllib.loads(text)["thresholds"]["calibrated-nebius"]
    assert table["match"] == ["NVIDIA H100 80GB HBM3"] and table["extends"] == "nebius"
    assert table["compute.matmul_bf16"] == {"unit": "TFLOP/s", "fail_below": 585, "warn_below": 617.5}
    assert table["gpu.ecc_volatile_uncorrectable"] == {"unit": "count", "fail_above": 0, "warn_above": 0}
    assert table["compute.memcopy"]["fail_below"] == pytest.approx(1.8e-05)
    assert "baseline.regression" not in table and "gpu.temperature" not in table  # not a cluster metric / wrong unit
    assert "# WARNING: 1 measurement(s) failed" not in text  # the wrong-unit one was never used


def test_fractions_are_checked_and_set_names_are_toml_keys():
    with pytest.raises(ConfigError, match="need 0 < fail ≤ warn ≤ 1"):
        Fractions(fail=0.95, warn=0.9)
    assert set_name_for("my cluster/a") == "calibrated-my-cluster-a"

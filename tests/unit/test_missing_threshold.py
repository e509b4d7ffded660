"""Which set a run judges by and what a missing bound says: the file, the set (once when it is
``default``), the metric, and how to add it."""

from __future__ import annotations

import pytest

from pytest_gpucluster.config import Profile, Threshold
from pytest_gpucluster.config.thresholds import ThresholdSet, choose_set, no_set_for
from pytest_gpucluster.errors import MissingThresholdError

TEMP = Threshold("gpu.temperature", "C", fail_above=85)
SETS = {"default": {"gpu.temperature": TEMP}, "h100": {}}
MATCHES = {"default": (), "h100": ("H100",)}


def test_the_default_set_is_named_once():
    ts = choose_set(SETS, MATCHES, Profile("p", executor="local"), None, "t.toml")
    with pytest.raises(MissingThresholdError) as err:
        ts["compute.matmul_bf16"]
    text = str(err.value)
    assert "no threshold for 'compute.matmul_bf16' in set 'default';" in text
    assert "nor in" not in text and '[thresholds.default.compute.matmul_bf16] with unit = "TFLOP/s"' in text
    assert (err.value.metric, err.value.set_name) == ("compute.matmul_bf16", "default")


def test_a_matched_set_falls_back_on_default():
    ts = choose_set(SETS, MATCHES, Profile("p", executor="local"), "NVIDIA H100 80GB HBM3", "t.toml")
    assert ts.name == "h100" and not ts.unmatched and ts["gpu.temperature"] is TEMP
    assert "in set 'h100' nor in 'default'; add [thresholds.h100.compute.memcopy]" in ts.missing("compute.memcopy")


def test_a_model_no_set_matches_is_named_with_the_ways_out():
    ts = choose_set(SETS, MATCHES, Profile("p", executor="local"), "NVIDIA H200", "t.toml")
    assert (ts.name, ts.unmatched) == ("default", "NVIDIA H200")
    text = ts.missing("compute.matmul_bf16")
    assert "no [thresholds.SET] matches GPU model 'NVIDIA H200'" in text
    assert 'thresholds = "SET"' in text and "--gpucluster-calibrate=PATH" in text


def test_an_unknown_metric_is_no_missing_bound():
    ts = ThresholdSet("default", {})
    with pytest.raises(Exception) as err:
        ts["compute.no_such_thing"]
    assert not isinstance(err.value, MissingThresholdError)


def test_a_profile_model_without_a_set():
    profile = Profile("h200", gpus_per_node=8, gpu_model="NVIDIA H200")
    why = no_set_for("t.toml", profile, MATCHES)
    assert why is not None and "profiles.h200.gpu_model = 'NVIDIA H200'" in why and "match lists: h100: H100" in why
    assert no_set_for("t.toml", Profile("h100", gpus_per_node=8, gpu_model="H100 SXM"), MATCHES) is None
    assert no_set_for("t.toml", Profile("named", gpus_per_node=8, gpu_model="B200", thresholds="h100"), MATCHES) is None
    assert no_set_for("t.toml", Profile("none", gpus_per_node=8), MATCHES) is None

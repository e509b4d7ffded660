"""Measurement × threshold → verdict sentences (value, unit, bound, source)."""

from __future__ import annotations

import math

from pytest_gpucluster.config import Threshold
from pytest_gpucluster.verdict import Measurement, judge

BUSBW = Threshold("nccl.all_reduce.intra_node", "GB/s", fail_below=330, warn_below=355, source="t.toml [x]")
TEMP = Threshold("gpu.temperature", "C", fail_above=85, warn_above=75, source="t.toml [y]")


def m(value: float, metric: str = "nccl.all_reduce.intra_node", unit: str = "GB/s") -> Measurement:
    return Measurement(metric, value, unit, where="node3", detail="1 GiB")


def test_pass_warn_fail_on_a_higher_is_better_metric():
    assert judge(m(360), BUSBW).status == "pass"
    warn = judge(m(340), BUSBW)
    assert warn.status == "warn"
    assert warn.sentence == (
        "node3: nccl.all_reduce.intra_node (1 GiB) = 340 GB/s is below the warn line 355 GB/s "
        "(fail < 330 GB/s, warn < 355 GB/s; t.toml [x])"
    )
    fail = judge(m(321.4), BUSBW)
    assert fail.status == "fail"
    assert "= 321.4 GB/s is below the fail line 330 GB/s" in fail.sentence


def test_lower_is_better_metric():
    assert judge(m(60, "gpu.temperature", "C"), TEMP).status == "pass"
    assert judge(m(80, "gpu.temperature", "C"), TEMP).status == "warn"
    assert judge(m(90, "gpu.temperature", "C"), TEMP).status == "fail"


def test_nan_and_unit_mismatch_never_pass():
    assert judge(m(math.nan), BUSBW).status == "fail"
    assert judge(m(400, unit="Gb/s"), BUSBW).status == "fail"


def test_xfail_threshold_turns_fail_into_expected():
    t = Threshold("nccl.all_reduce.intra_node", "GB/s", fail_below=330, xfail="known slow NVSwitch tray")
    v = judge(m(100), t)
    assert v.status == "xfail" and "known slow NVSwitch tray" in v.sentence


def test_a_pass_against_a_path_line_says_the_path_was_proven_not_a_speed():
    path = Threshold("train.ddp.tokens_per_s_per_gpu", "tokens/s", fail_below=1, path_only=True, source="t.toml [z]")
    across = Measurement("train.ddp.tokens_per_s_per_gpu", 22541.6, "tokens/s", where="node1+node2")
    proven = judge(across, path)
    assert (proven.status, proven.proves_path) == ("pass", True)
    assert proven.sentence == (
        "node1+node2: train.ddp.tokens_per_s_per_gpu = 22541.6 tokens/s, "
        "path proven (fail < 1 tokens/s is a path line, not a speed)"
    )
    # a zero fails the path line as any line; a pass against a real line is a pass of its speed
    stopped = judge(Measurement("train.ddp.tokens_per_s_per_gpu", 0.0, "tokens/s"), path)
    assert (stopped.status, stopped.proves_path) == ("fail", False)
    real = judge(m(360), BUSBW)
    assert not real.proves_path and real.sentence.endswith("within bounds (fail < 330 GB/s, warn < 355 GB/s)")

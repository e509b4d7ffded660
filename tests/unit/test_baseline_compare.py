"""Baseline comparison: direction-aware regression, judged by the thresholds file."""

from __future__ import annotations

from pytest_gpucluster.config import Threshold
from pytest_gpucluster.results.baseline import compare, regression_pct

THRESHOLD = Threshold("baseline.regression", "%", fail_above=10, warn_above=5, source="t [baseline]")


def _doc(values, **cluster):
    ms = [{"metric": m, "value": v, "unit": u, "where": w, "detail": ""} for m, v, u, w in values]
    return {"tests": [{"measurements": ms}], "cluster": cluster, "environment": {}, "nodes": ["n1"]}


def test_regression_is_direction_aware():
    assert regression_pct("nccl.all_reduce.inter_node", 400, 360) == 10.0  # higher is better: a drop
    assert regression_pct("gpu.temperature", 50, 60) == 20.0  # lower is better: a rise
    assert regression_pct("gpu.temperature", 50, 40) == -20.0
    assert regression_pct("gpu.ecc_volatile_uncorrectable", 0, 3) is None


def test_compare_judges_common_measurements_and_lists_the_rest():
    before = _doc(
        [
            ("nccl.all_reduce.inter_node", 400.0, "GB/s", "n1"),
            ("gpu.temperature", 50.0, "C", "n1:gpu0"),
            ("compute.memcopy", 3.0, "TB/s", "n1:gpu0"),
        ],
        gpu_model="H100",
    )
    after = _doc(
        [
            ("nccl.all_reduce.inter_node", 350.0, "GB/s", "n1"),
            ("gpu.temperature", 52.0, "C", "n1:gpu0"),
            ("compute.matmul_bf16", 700.0, "TFLOP/s", "n1:gpu0"),
        ],
        gpu_model="H200",
    )
    c = compare(after, before, THRESHOLD)
    assert [(ch.key[0], ch.verdict.status) for ch in c.changes] == [
        ("nccl.all_reduce.inter_node", "fail"),
        ("gpu.temperature", "pass"),
    ]
    assert c.failed[0].verdict.measurement.value == 12.5
    assert c.only_in_baseline == (("compute.memcopy", "n1:gpu0", ""),)
    assert c.only_in_run == (("compute.matmul_bf16", "n1:gpu0", ""),)
    assert c.environment_differences == ("GPU model: H100 (baseline) → H200 (this run)",)

"""A GPU that lags its node's median is found and named."""

from __future__ import annotations

import pytest

from pytest_gpucluster.workloads.compute import GpuCeiling, by_node, fractions_of_median, outliers

# numbers.md: 4×H200 all at once, and GPU 0 while another process shared it.
HEALTHY = {"n1:gpu0": 728.0, "n1:gpu1": 740.0, "n1:gpu2": 728.0, "n1:gpu3": 762.0}
CONTENDED = {**HEALTHY, "n1:gpu0": 321.0}


def test_healthy_node_has_no_outlier():
    assert outliers(HEALTHY, 0.8) == []
    assert all(0.95 < f < 1.05 for f in fractions_of_median(HEALTHY).values())


def test_contended_gpu_is_named_with_its_fraction():
    low = outliers(CONTENDED, 0.8)
    assert [w for w, _, _ in low] == ["n1:gpu0"]
    assert low[0][1] == 321.0
    assert low[0][2] == pytest.approx(321.0 / 734.0)


def test_two_gpus_one_slow_flags_only_the_slow_one():
    low = outliers({"a:gpu0": 100.0, "a:gpu1": 30.0}, 0.8)
    assert [w for w, _, _ in low] == ["a:gpu1"]


def test_worst_first_and_single_gpu_is_its_own_median():
    low = outliers({"g0": 10.0, "g1": 100.0, "g2": 100.0, "g3": 50.0, "g4": 100.0}, 0.8)
    assert [w for w, _, _ in low] == ["g0", "g3"]
    assert fractions_of_median({"only": 5.0}) == {"only": 1.0}


def test_zero_median_gives_zero_fractions_and_empty_input_nothing():
    assert fractions_of_median({"a": 0.0, "b": 0.0, "c": 1.0}) == {"a": 0.0, "b": 0.0, "c": 0.0}
    assert fractions_of_median({}) == {}


def test_by_node_groups_and_orders_gpus_numerically():
    def c(node, gpu):
        return GpuCeiling(node, gpu, "NVIDIA H200", "bf16", 700.0, 4.2, True)

    grouped = by_node([c("n2", "gpu10"), c("n1", "gpu1"), c("n2", "gpu2"), c("n1", "gpu0")])
    assert [g.where for g in grouped["n1"]] == ["n1:gpu0", "n1:gpu1"]
    assert [g.where for g in grouped["n2"]] == ["n2:gpu2", "n2:gpu10"]

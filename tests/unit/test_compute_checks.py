"""Per-GPU compute judged as data: each GPU's ceilings and its fraction of the node's median are
measurements of that GPU, and a wrong product or a slowed-down burn is a finding of its GPU."""

from __future__ import annotations

import pytest

from pytest_gpucluster.checks import compute
from pytest_gpucluster.workloads.compute import BurnResult, GpuCeiling
from pytest_gpucluster.workloads.nvml_util import NvmlSample


def _gpu(i: int, tflops: float, *, node: str = "n1", checked: bool = True, label: str = "") -> GpuCeiling:
    return GpuCeiling(node, label or f"gpu{i}", "NVIDIA H200", "bf16", tflops, 4.0, checked, 8192, 4 * 2**30)


def test_each_gpu_is_measured_with_its_fraction_of_the_median():
    gpus = [_gpu(0, 321.0), _gpu(1, 740.0), _gpu(2, 728.0), _gpu(3, 762.0)]
    measured = compute.ceiling_measurements(gpus, "77")
    assert len(measured) == 16  # two metrics, each value and its fraction, per GPU
    slow = next(m for m in measured if m.gpu == 0 and m.metric == compute.MEDIAN_METRIC)
    assert (slow.nodes, slow.culprits, slow.where, slow.job_id) == (("n1",), ("n1",), "n1:gpu0", "77")
    assert slow.value == pytest.approx(321.0 / 734.0)
    assert slow.detail == "compute.matmul_bf16 vs node median"


def test_each_metric_names_what_it_measured():
    gpus = [_gpu(0, 740.0), _gpu(1, 741.0)]
    details = {m.metric: m.detail for m in compute.ceiling_measurements(gpus, "77") if m.gpu == 0}
    assert details == {
        "compute.matmul_bf16": "NVIDIA H200, bf16 GEMM of 8192 × 8192 matrices",
        "compute.memcopy": "NVIDIA H200, 4 GiB copied device to device",  # a copy has no precision
        compute.MEDIAN_METRIC: "compute.memcopy vs node median",
    }


def test_one_gpu_has_no_median_and_a_cpu_rank_is_named_in_the_detail():
    cpu = GpuCeiling("n1", "cpu0", "cpu", "fp32", 1.0, 0.1, True, 256, 16 * 2**20)
    (mm, cp) = compute.ceiling_measurements([cpu], "5", stand_in=True)
    assert (mm.metric, mm.nodes, mm.gpu, mm.where) == ("compute.matmul_bf16", ("n1",), None, "n1:cpu0")
    assert (
        mm.detail
        == "cpu, fp32 GEMM of 256 × 256 matrices (CPU stand-in); one GPU on the node: no node median to compare"
    )
    assert cp.metric == "compute.memcopy"
    assert cp.detail.startswith("cpu, 16 MiB copied device to device (CPU stand-in)")


def test_a_wrong_product_and_a_slowed_burn_are_their_gpus():
    (wrong,) = compute.wrong_products([_gpu(0, 700.0), _gpu(1, 700.0, checked=False)])
    assert (wrong.text, wrong.scope, wrong.gpu, wrong.culprits) == (
        "n1:gpu1: GEMM result wrong (checked against fp32)",
        "gpu",
        1,
        ("n1",),
    )
    hot = NvmlSample(12.0, 1200, 91, 690.0, 0x40)
    burns = [
        BurnResult("n1", "gpu3", "NVIDIA H200", 60.0, 700.0, (hot, hot), ((12.0, ("hw_thermal_slowdown",)),), ()),
        BurnResult("n1", "gpu5", "NVIDIA H200", 60.0, 700.0, (), (), ("NVML: Unknown Error",)),
    ]
    found = compute.burn_findings(burns)
    assert [(f.text, f.gpu) for f in found] == [
        ("n1:gpu3: hw_thermal_slowdown in 1 of 2 samples (first at 12 s)", 3),
        ("n1:gpu5: NVML read no sample (NVML: Unknown Error)", 5),
    ]

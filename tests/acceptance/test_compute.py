"""Per-GPU compute and memory: every GPU of every node,
all at once, reaches its bf16 GEMM and device-copy floors and none lags its own node's median;
a slow burn under load shows no thermal or hardware power slowdown.

Sizes come from the profile's [compute] table; on nodes without GPUs, fp32 on CPU ranks with
tiny sizes stands in (workloads/compute.py: plan_compute).
"""

from __future__ import annotations

import pytest

from pytest_gpucluster.plan import jobs
from pytest_gpucluster.verdict import Measurement
from pytest_gpucluster.workloads.compute import fractions_of_median


def _per_gpu(metric, unit, values, median_of, job, detail):
    """Each GPU's value and its fraction of its node's median; a node of one GPU has no peer to
    compare with, so only its value is judged, and the detail says so."""
    if len(values) == 1:
        return [
            Measurement(metric, v, unit, where, f"{detail}; one GPU on the node: no node median to compare", job)
            for where, v in values.items()
        ]
    ratios = fractions_of_median(median_of)
    return [
        m
        for where, v in values.items()
        for m in (
            Measurement(metric, v, unit, where, detail, job),
            Measurement(
                "compute.fraction_of_node_median", ratios[where], "ratio", where, f"{metric} vs node median", job
            ),
        )
    ]


@pytest.mark.uses(jobs.CEILINGS)
def test_gpu_compute_and_memory(measured, judge, record, thresholds, node):
    nodes, job, plan = measured()  # riding in the intra-node NCCL job when the run has it
    gpus = nodes.get(node) or pytest.fail(f"{node}: no result in job {job}", pytrace=False)
    detail = f"{gpus[0].device_name}, {gpus[0].dtype}" + (" (CPU stand-in, tiny sizes)" if plan.note else "")
    mm, cp = {g.where: g.matmul_tflops for g in gpus}, {g.where: g.copy_tbps for g in gpus}
    for name, unit, values in (("compute.matmul_bf16", "TFLOP/s", mm), ("compute.memcopy", "TB/s", cp)):
        record(
            "series",
            name=name,
            where=node,
            x_label="gpu",
            y_label=unit,
            threshold=getattr(thresholds.get(name), "fail_below", None),
            points=[[i, v] for i, v in enumerate(values.values())],
        )
    judge.problems(
        [f"{g.where}: GEMM result wrong (checked against fp32)" for g in gpus if not g.matmul_checked],
        f"job {job}: wrong matrix products",
    )
    judge.all(
        _per_gpu("compute.matmul_bf16", "TFLOP/s", mm, mm, job, detail)
        + _per_gpu("compute.memcopy", "TB/s", cp, cp, job, detail)
    )


@pytest.mark.slow
@pytest.mark.gpu
@pytest.mark.uses(jobs.BURN)
def test_gpu_burn_without_throttling(measured, judge, record, node):
    nodes, job, plan = measured()
    gpus = nodes.get(node) or pytest.fail(f"{node}: no result in job {job}", pytrace=False)
    for g in gpus:
        for name, y, pick in (("sm_clock", "MHz", "sm_clock_mhz"), ("temperature", "C", "temperature_c")):
            record(
                "series",
                name=f"compute.burn.{name}",
                where=g.where,
                x_label="s",
                y_label=y,
                points=[[round(s.t_s, 1), getattr(s, pick)] for s in g.samples],
            )
    problems = [
        f"{g.where}: {', '.join(sorted({r for _, rs in g.failing for r in rs}))} in {len(g.failing)} "
        f"of {len(g.samples)} samples (first at {g.failing[0][0]:.0f} s)"
        for g in gpus
        if g.failing
    ]
    problems += [f"{g.where}: NVML read no sample ({'; '.join(g.nvml_errors)})" for g in gpus if not g.samples]
    load = f"{plan.config.burn_s} s of GEMM load"
    judge.problems(problems, f"job {job}: GPUs slowed down for heat or power during {load}")

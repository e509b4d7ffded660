"""Per-GPU compute and memory: every GPU of every node,
all at once, reaches its bf16 GEMM and device-copy floors and none lags its own node's median;
a slow burn under load shows no thermal or hardware power slowdown.

Sizes come from the profile's [compute] table; on nodes without GPUs, fp32 on CPU ranks with
tiny sizes stands in (workloads/compute.py: plan_compute).
"""

from __future__ import annotations

import pytest

from pytest_gpucluster.checks import compute
from pytest_gpucluster.plan import jobs


@pytest.mark.uses(jobs.CEILINGS)
def test_gpu_compute_and_memory(measured, judge, record, thresholds, node):
    nodes, job, plan = measured()  # riding in the intra-node NCCL job when the run has it
    gpus = nodes.get(node) or pytest.fail(f"{node}: no result in job {job}", pytrace=False)
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
    judge.findings(compute.wrong_products(gpus), f"job {job}: wrong matrix products")
    judge.all(compute.ceiling_measurements(gpus, job, stand_in=bool(plan.note)))


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
    load = f"{plan.config.burn_s} s of GEMM load"
    judge.findings(compute.burn_findings(gpus), f"job {job}: GPUs slowed down for heat or power during {load}")

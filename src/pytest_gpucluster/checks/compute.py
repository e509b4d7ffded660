"""Per-GPU compute and memory, judged on the login node: one node's ceilings
(``workloads.compute.GpuCeiling``) as measurements of each GPU, its value and its fraction of
the node's median, and what the GPUs got wrong: a wrong matrix product, and clocks slowed down
for heat or power under the burn (``BurnResult``), each a finding of its GPU.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

from pytest_gpucluster.checks.places import gpu_index
from pytest_gpucluster.verdict import Finding, Measurement
from pytest_gpucluster.workloads.busbw import human_bytes
from pytest_gpucluster.workloads.compute import BurnResult, GpuCeiling, fractions_of_median

MEDIAN_METRIC = "compute.fraction_of_node_median"
# metric → (unit, the reading of a GPU)
CEILINGS: dict[str, tuple[str, Callable[[GpuCeiling], float]]] = {
    "compute.matmul_bf16": ("TFLOP/s", lambda g: g.matmul_tflops),
    "compute.memcopy": ("TB/s", lambda g: g.copy_tbps),
}
STAND_IN = " (CPU stand-in)"


def _at(metric: str, value: float, unit: str, g: GpuCeiling, detail: str, job: str) -> Measurement:
    """A measurement of ``g``'s GPU; of its node for a CPU rank standing in for one, which the
    sentence still names (``node1:cpu0``)."""
    gpu = gpu_index(g.gpu)
    m = Measurement.at(metric, value, unit, g.node, gpu=gpu, detail=detail, job_id=job)
    return m if gpu is not None else dataclasses.replace(m, where=g.where)


def ceiling_detail(metric: str, g: GpuCeiling, *, stand_in: bool = False) -> str:
    """What ``metric`` measured on ``g``: the GEMM's precision and matrix size, the bytes the
    copy moved (a copy has no precision), and whether a CPU rank stood in for a GPU."""
    note = STAND_IN if stand_in else ""
    if metric == "compute.matmul_bf16":
        size = f" of {g.matmul_n} × {g.matmul_n} matrices" if g.matmul_n else ""
        return f"{g.device_name}, {g.dtype} GEMM{size}{note}"
    size = f"{human_bytes(g.copy_bytes)} " if g.copy_bytes else ""
    return f"{g.device_name}, {size}copied device to device{note}"


def ceiling_measurements(gpus: Sequence[GpuCeiling], job: str, *, stand_in: bool = False) -> list[Measurement]:
    """Each GPU's GEMM and copy rate, each with what it measured (``ceiling_detail``), and each
    one's fraction of its node's median; a node of one GPU has no peer to compare with, so only
    its value is judged, and the detail says so. ``stand_in``: CPU ranks stood in for GPUs."""
    out: list[Measurement] = []
    for metric, (unit, read) in CEILINGS.items():
        if len(gpus) == 1:
            g = gpus[0]
            note = f"{ceiling_detail(metric, g, stand_in=stand_in)}; one GPU on the node: no node median to compare"
            out.append(_at(metric, read(g), unit, g, note, job))
            continue
        ratios = fractions_of_median({g.gpu: read(g) for g in gpus})
        for g in gpus:
            out.append(_at(metric, read(g), unit, g, ceiling_detail(metric, g, stand_in=stand_in), job))
            out.append(_at(MEDIAN_METRIC, ratios[g.gpu], "ratio", g, f"{metric} vs node median", job))
    return out


def wrong_products(gpus: Sequence[GpuCeiling]) -> list[Finding]:
    """A failure of each GPU whose sampled product did not match the fp32 reference."""
    return [
        Finding.on_node(g.node, f"{g.where}: GEMM result wrong (checked against fp32)", gpu=gpu_index(g.gpu))
        for g in gpus
        if not g.matmul_checked
    ]


def burn_findings(burns: Sequence[BurnResult]) -> list[Finding]:
    """A failure of each GPU that slowed down for heat or power under the burn, with the reasons
    and how many samples showed them, or of which NVML read no sample."""
    found = [
        Finding.on_node(
            b.node,
            f"{b.where}: {', '.join(sorted({r for _, rs in b.failing for r in rs}))} in {len(b.failing)} "
            f"of {len(b.samples)} samples (first at {b.failing[0][0]:.0f} s)",
            gpu=gpu_index(b.gpu),
        )
        for b in burns
        if b.failing
    ]
    found += [
        Finding.on_node(b.node, f"{b.where}: NVML read no sample ({'; '.join(b.nvml_errors)})", gpu=gpu_index(b.gpu))
        for b in burns
        if not b.samples
    ]
    return found

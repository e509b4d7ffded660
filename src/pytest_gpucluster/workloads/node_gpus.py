"""One job for two per-node measurements that hold every GPU of every node with one task per
GPU: each GPU's compute and memory ceilings (every GPU alone, all at once), then the intra-node
collective sweeps under the telemetry sampler. Run as two jobs they would pay the scheduler's
start of a job twice, one after the other; here one process group serves both phases, and each
phase's clock is returned so the run's timing can still say which area spent what.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from pytest_gpucluster.workloads.busbw import SweepResult
from pytest_gpucluster.workloads.collectives import collective_sweeps
from pytest_gpucluster.workloads.compute import ComputeConfig, GpuCeiling, ceilings_here
from pytest_gpucluster.workloads.context import TaskContext
from pytest_gpucluster.workloads.distributed import process_group
from pytest_gpucluster.workloads.telemetry import UnderTelemetry, under_telemetry


@dataclass(frozen=True)
class CeilingsThenSweeps:
    """One task's part of the job: its GPU's ceilings, then its sweeps (the node group's first
    rank holds the results, others an empty list) and, on a node's first task, the telemetry."""

    ceiling: GpuCeiling
    ceilings_span: tuple[float, float]  # epoch seconds
    sweeps: UnderTelemetry[list[SweepResult]]
    sweeps_span: tuple[float, float]


def ceilings_then_sweeps(ctx: TaskContext, *, compute: ComputeConfig, backend: str | None = None,
                         timeout_s: float = 600.0, **sweep_kwargs: Any) -> CeilingsThenSweeps:  # fmt: skip
    """Workload: ``ceilings_here`` then ``under_telemetry(collective_sweeps, **sweep_kwargs)``
    in the same process group (NCCL on GPUs, gloo on CPU ranks). A phase that raises ends the
    task with its error, as it would in a job of its own."""
    with process_group(ctx, backend=backend, timeout_s=timeout_s) as be:
        t0 = time.time()
        ceiling = ceilings_here(ctx, config=compute, backend=be)
        t1 = time.time()
        sweeps = under_telemetry(ctx, fn=collective_sweeps, backend=be, timeout_s=timeout_s, **sweep_kwargs)
        t2 = time.time()
    return CeilingsThenSweeps(ceiling, (t0, t1), sweeps, (t1, t2))

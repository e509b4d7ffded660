"""One job for the per-node work that holds every GPU of every node: the read-only node probe
(GPU health at rest, InfiniBand, the inventory), each GPU's compute and memory ceilings (every GPU
alone, all at once), then the intra-node collective sweeps under the telemetry sampler. Run as
separate jobs they would each pay the scheduler's start of a job, one after the other; here one
process group serves the measuring phases, and each phase's clock is returned so the run's timing
can still say which area spent what.

The probe comes first and its GPU health before anything touches CUDA: the node's first task reads
NVML while the others wait at a gate (a file in /dev/shm, bounded), so
"memory used at rest" is never this job's own contexts.
"""

from __future__ import annotations

import contextlib
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_gpucluster.workloads.busbw import SweepResult
from pytest_gpucluster.workloads.collectives import collective_sweeps
from pytest_gpucluster.workloads.compute import ComputeConfig, GpuCeiling, ceilings_here
from pytest_gpucluster.workloads.context import TaskContext
from pytest_gpucluster.workloads.distributed import process_group
from pytest_gpucluster.workloads.inventory import node_name
from pytest_gpucluster.workloads.node_probe import PARTS, NodeProbe, probe_node
from pytest_gpucluster.workloads.telemetry import UnderTelemetry, under_telemetry

AT_REST_PART = "gpu_health"  # read before any task of the node creates a CUDA context
GATE_POLL_S = 0.02

Span = tuple[float, float]  # epoch seconds


@dataclass(frozen=True)
class NodeGpusRun:
    """One task's part of the job: its sweeps (the node group's first rank holds the results,
    others an empty list) and, on a node's first task, the telemetry; its GPU's ceilings where
    they were asked for; the node's probe on the node's first task where it was asked for."""

    sweeps: UnderTelemetry[list[SweepResult]]
    sweeps_span: Span
    ceiling: GpuCeiling | None = None
    ceilings_span: Span | None = None
    probe: NodeProbe | None = None
    probe_span: Span | None = None


def gate_dir() -> Path:
    """A directory every task of the job on this node sees, and only this node: /dev/shm (not
    $TMPDIR, which a site may set per task; not the shared filesystem, whose clients may cache
    a file's absence)."""
    shm = Path("/dev/shm")
    return shm if shm.is_dir() else Path(tempfile.gettempdir())


def gate_path(ctx: TaskContext) -> Path:
    """The node-local file whose presence says the node's GPUs have been read at rest."""
    return gate_dir() / f"gpucluster-{ctx.job_id}-{node_name(ctx)}-read-at-rest"


def probe_first(ctx: TaskContext, *, shared_fs: str | None = None, gate_timeout_s: float = 300.0) -> NodeProbe | None:
    """The node's first task reads the probe's parts, GPU health first, then opens the gate;
    every other task of the node waits (bounded) at the gate and returns None."""
    gate = gate_path(ctx)
    if ctx.local_rank != 0:
        deadline = time.monotonic() + gate_timeout_s
        while not gate.exists():
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"{node_name(ctx)}: the node's first task did not read its GPUs at rest within "
                    f"{gate_timeout_s:.0f} s ({gate} never appeared); see that task's log"
                )
            time.sleep(GATE_POLL_S)
        return None
    try:
        at_rest = probe_node(ctx, shared_fs=shared_fs, parts=(AT_REST_PART,))
    finally:
        gate.touch()
    rest = probe_node(ctx, shared_fs=shared_fs, parts=tuple(p for p in PARTS if p != AT_REST_PART))
    return NodeProbe(at_rest.node, {**at_rest.parts, **rest.parts})


def node_gpus_job(
    ctx: TaskContext,
    *,
    compute: ComputeConfig | None = None,
    probe: bool = False,
    shared_fs: str | None = None,
    backend: str | None = None,
    timeout_s: float = 600.0,
    **sweep_kwargs: Any,
) -> NodeGpusRun:
    """Workload: with ``probe``, ``probe_first``; then in one process group (NCCL on GPUs, gloo
    on CPU ranks), with ``compute``, ``ceilings_here``; then ``under_telemetry(collective_sweeps,
    **sweep_kwargs)``. A phase that raises ends the task with its error, as it would in a job of
    its own (the login side then reads the probe in a job of its own)."""
    probed: NodeProbe | None = None
    probe_span: Span | None = None
    try:
        if probe:
            t = time.time()
            probed = probe_first(ctx, shared_fs=shared_fs, gate_timeout_s=timeout_s)
            probe_span = (t, time.time())
        ceiling: GpuCeiling | None = None
        ceilings_span: Span | None = None
        with process_group(ctx, backend=backend, timeout_s=timeout_s) as be:
            if compute is not None:
                t = time.time()
                ceiling = ceilings_here(ctx, config=compute, backend=be)
                ceilings_span = (t, time.time())
            t = time.time()
            sweeps = under_telemetry(ctx, fn=collective_sweeps, backend=be, timeout_s=timeout_s, **sweep_kwargs)
            sweeps_span = (t, time.time())
    finally:
        if probe and ctx.local_rank == 0:
            with contextlib.suppress(OSError):
                gate_path(ctx).unlink()
    return NodeGpusRun(sweeps, sweeps_span, ceiling, ceilings_span, probed, probe_span)

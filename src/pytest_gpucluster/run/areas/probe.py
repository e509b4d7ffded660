"""The shared node probe (``workloads/node_probe.py``): once per run GPU health, InfiniBand, the
inventory, the node's settings and the vendor tools' presence are read on every node; each area
takes its part (``checks/probe.py``). When the plan has the intra-node NCCL job, the probe is that job's first
phase (``nccl.probe_rides_along``); otherwise it is a job of its own, started ahead. If the shared
job fails, the probe is read again in a job of its own, so a broken collective does not hide the
GPU readings that may explain it.

If that job cannot run at all (a node offers fewer GPUs than the profile says, so Slurm cannot
place a job asking for all of them), the InfiniBand ports, which need no GPU, are read in a job of
their own (``jobs.INFINIBAND``), so one fault does not hide the readings it does not touch.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

from pytest_gpucluster.checks import probe as probe_parts
from pytest_gpucluster.errors import GpuClusterError
from pytest_gpucluster.plan import jobs
from pytest_gpucluster.run.areas import nccl
from pytest_gpucluster.run.context import JobContext
from pytest_gpucluster.run.produce import answered, produces, spec_of
from pytest_gpucluster.workloads.node_probe import NodeProbe

Fallback = Callable[[], dict[str, Any]]


@produces(jobs.NODE_PROBE)
def probes(ctx: JobContext) -> dict[str, NodeProbe]:
    """node → NodeProbe: from the intra-node job where the probe rides in it (and that job ran),
    else from a job of its own; what the early start produces."""

    def produce() -> dict[str, NodeProbe]:
        workload = jobs.NODE_PROBE.workload
        assert workload is not None
        spec = spec_of(ctx, jobs.NODE_PROBE)
        results = answered(lambda: ctx.run(workload, spec, shared_fs=ctx.profile.shared_fs))
        return {r.value.node: r.value for r in results}

    if nccl.probe_rides_along(ctx):
        with contextlib.suppress(GpuClusterError):  # read again on its own below
            shared = nccl.intra_node_job(ctx).probes
            if shared is not None:
                return shared
    return ctx.once(("node-probe",), produce, light=True)


def readings(ctx: JobContext, part: str, *, fallback: Fallback | None = None) -> dict[str, Any]:
    """node → ``part``'s reading (a PartError where it raised on that node). When the probe job
    failed as a whole, ``fallback`` (once per run) produces the readings instead, if given."""
    try:
        found = probes(ctx)
    except GpuClusterError:
        if fallback is None:
            raise
        return ctx.once(("node-probe-fallback", part), fallback, light=True)
    return probe_parts.part(found, part)


@produces(jobs.INFINIBAND)
def infiniband(ctx: JobContext) -> dict[str, Any]:
    """node → its InfiniBand ports, from the node probe; if its job cannot run (it holds every
    GPU), from a job of their own that asks for none."""

    def own_job() -> dict[str, Any]:
        assert jobs.INFINIBAND.workload is not None
        return {r.node: r.value for r in ctx.run(jobs.INFINIBAND.workload, spec_of(ctx, jobs.INFINIBAND))}

    return readings(ctx, "infiniband", fallback=own_job)


def absent_everywhere(ctx: JobContext, tool: str) -> bool:
    """Whether the probe found ``tool`` on none of the tested nodes' PATH (so its check submits
    no job); False when any node has it, or the probe could not tell."""
    try:
        where = readings(ctx, tool)
    except GpuClusterError:
        return False  # the probe job could not run: the tool's own job finds out for itself
    return bool(where) and set(where) >= set(ctx.live_nodes) and all(path is None for path in where.values())

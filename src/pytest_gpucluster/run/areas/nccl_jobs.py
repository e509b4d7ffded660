"""The collective jobs: one job of sweeps over a set of nodes, its environment (NCCL's algorithm,
NVLS, NCCL's log files) and, for the run's intra-node job, what rides along in it (the node probe
first, then the compute ceilings) and the telemetry sampler around the sweeps.

What runs on the nodes is ``workloads/collectives.py`` (torch) or ``workloads/nccl_tests.py``
(nccl-tests binaries); ``run/areas/nccl.py`` decides which job to run and when. The across-node
sweeps take their sizes and repetitions from ``[nccl_across]`` where the profile sets them there.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pytest_gpucluster.checks import pairing
from pytest_gpucluster.config import NcclSettings
from pytest_gpucluster.config.profile import sweep_settings
from pytest_gpucluster.plan import facts, jobs
from pytest_gpucluster.plan.sizing import check_fits, gpu_memory_bytes
from pytest_gpucluster.run.context import JobContext
from pytest_gpucluster.run.produce import spec_of
from pytest_gpucluster.workloads.busbw import SweepResult
from pytest_gpucluster.workloads.collectives import Groups, collective_sweeps
from pytest_gpucluster.workloads.compute import ComputePlan, GpuCeiling
from pytest_gpucluster.workloads.nccl_tests import run_nccl_tests
from pytest_gpucluster.workloads.node_gpus import node_gpus_job
from pytest_gpucluster.workloads.node_probe import NodeProbe
from pytest_gpucluster.workloads.pair_exchange import PairResult, sweeps_then_pairs
from pytest_gpucluster.workloads.telemetry import NodeTelemetry, under_telemetry

# The areas (test files) the node probe serves: each is given the probe's part of a shared job.
PROBE_AREAS = ("gpu_health", "infiniband", "inventory", "dcgm")

# Set by the profile, these leave NCCL's logging as the site wants it (and the sweeps record only
# what was asked for, not NCCL's transports).
NCCL_DEBUG_VARS = ("NCCL_DEBUG", "NCCL_DEBUG_FILE", "NCCL_DEBUG_SUBSYS")


@dataclass(frozen=True)
class IntraNodeRun:
    """A job of sweeps: every node's or the nodes' together; for the run's intra-node job what the
    telemetry sampler saw and, where they rode along, every GPU's compute ceilings and every
    node's probe (node → NodeProbe); for the across-node job the neighbour pairs riding in it."""

    sweeps: list[SweepResult]
    telemetry: list[NodeTelemetry]
    ceilings: list[GpuCeiling] | None = None
    job_id: str = ""
    probes: dict[str, NodeProbe] | None = None
    pairs: list[PairResult] | None = None  # the neighbour pairs, where they rode after the sweeps


@dataclass(frozen=True)
class RidingPairs:
    """The neighbour pairs riding in the across-node job: their rounds and ``exchange_rounds``'
    other arguments (sizes, repetitions)."""

    rounds: tuple[tuple[tuple[str, str], ...], ...]
    args: Mapping[str, Any]


# A small message for the neighbour pairs' latency; their bandwidth is measured at the across-node
# sweeps' judged size.
PAIR_LATENCY_BYTES = 8 * 2**10


def neighbour_rounds(nodes: Sequence[str]) -> tuple[tuple[tuple[str, str], ...], ...]:
    """The straggler check's rounds of neighbour pairs over ``nodes`` (``checks.pairing``)."""
    return tuple(tuple(r) for r in pairing.neighbour_rounds(nodes))


def pair_args(ctx: JobContext) -> dict[str, Any]:
    """``exchange_rounds``' sizes and repetitions: those of the across-node sweeps."""
    s = settings(ctx, across=True)
    return {
        "latency_bytes": PAIR_LATENCY_BYTES,
        "bandwidth_bytes": s.judge_from_bytes,
        "warmup_iters": s.warmup_iters,
        "iters": s.iters,
    }


def settings(ctx: JobContext, *, across: bool) -> NcclSettings:
    """The sweep settings of the across-node sweeps (``[nccl_across]`` over ``[nccl]``) or of the
    intra-node ones (``[nccl]``)."""
    return sweep_settings(ctx.profile, across=across)


def nccl_log_env(ctx: JobContext, name: str) -> dict[str, str]:
    """NCCL's INFO lines of initialisation into files of their own in the run's job folder, one
    per process (``%h.%p``), next to the job's logs: the sweep reads its transports from them.
    Nothing where the GPUs are not real or the profile sets NCCL's logging itself."""
    if not (ctx.profile.gpus_are_real and ctx.gpus_per_node) or any(k in ctx.profile.env for k in NCCL_DEBUG_VARS):
        return {}
    path = ctx.job_root / f"nccl-{name}-{uuid.uuid4().hex[:6]}.%h.%p.log"
    return {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,NET,ENV", "NCCL_DEBUG_FILE": str(path)}


def intra_env(ctx: JobContext, name: str = "intra") -> dict[str, str]:
    """The intra-node sweeps' environment: NVLS off unless the profile judges it (``[nccl] nvls``),
    since NVLS raises all_reduce busbw by a third."""
    env = nccl_log_env(ctx, name)
    return env if ctx.profile.nccl.nvls else {"NCCL_NVLS_ENABLE": "0", **env}


def inter_env(ctx: JobContext, name: str = "inter") -> dict[str, str]:
    """The across-node sweeps' environment: ``NCCL_ALGO`` from ``[nccl] inter_node_algo`` (none
    for ``auto``), so busbw on Ring is the network's and not tree's or NVLS-tree's."""
    algo = ctx.profile.nccl.inter_node_algo
    return {**({} if algo == "auto" else {"NCCL_ALGO": algo}), **nccl_log_env(ctx, name)}


def run_job(
    ctx: JobContext,
    name: str,
    *,
    groups: Groups,
    ops: Sequence[str],
    nodelist: tuple[str, ...] | None = None,
    env: dict[str, str] | None = None,
    min_bytes: int | None = None,
    sampled: bool = False,
    ceilings: ComputePlan | None = None,
    probe: bool = False,
    pairs: RidingPairs | None = None,
) -> IntraNodeRun:
    """One job of sweeps; with ``sampled`` it runs under the telemetry sampler (one per node),
    with ``ceilings`` each GPU's compute ceilings are measured first in the same job, with
    ``probe`` every node's probe is read before anything else, with ``pairs`` (the neighbour
    pairs' rounds and sizes) the pairs exchange after the sweeps."""
    across = groups != "node"
    s = settings(ctx, across=across)
    check_memory(ctx, s, across)
    use_tool = groups == "node" and facts.uses_nccl_tests(ctx.profile, ctx.gpus_per_node)
    request = jobs.NCCL_INTER if across else jobs.NCCL_INTRA_TESTS if use_tool else jobs.NCCL_INTRA
    spec = spec_of(ctx, request, name=name, env=env, nodelist=nodelist)
    fn: Any
    if use_tool:
        fn = run_nccl_tests
        kwargs: dict[str, Any] = dict(
            nccl_tests_dir=s.nccl_tests_dir,
            ops=tuple(ops),
            min_bytes=min_bytes or s.min_bytes,
            max_bytes=s.max_bytes,
            warmup_iters=s.warmup_iters,
            iters=s.iters,
            gpus=ctx.gpus_per_node,
            timeout_s=s.timeout_s,
        )
    else:
        fn = collective_sweeps
        kwargs = dict(
            ops=tuple(ops),
            min_bytes=min_bytes or s.min_bytes,
            max_bytes=s.max_bytes,
            warmup_iters=s.warmup_iters,
            iters=s.iters,
            groups=groups,
            timeout_s=s.timeout_s,
        )
    if (ceilings is not None or probe) and fn is collective_sweeps:
        both = ctx.run(
            node_gpus_job,
            spec,
            compute=ceilings.config if ceilings else None,
            probe=probe,
            shared_fs=ctx.profile.shared_fs,
            **kwargs,
        )
        parts = [r.value for r in both]
        sweeps_span = _span(p.sweeps_span for p in parts)
        areas = {"nccl": sweeps_span, "telemetry": sweeps_span}
        if ceilings is not None:
            areas["compute"] = _span(p.ceilings_span for p in parts)
        probes = {p.probe.node: p.probe for p in parts if p.probe is not None}
        if probe:
            probe_span = _span(p.probe_span for p in parts if p.probe is not None)
            areas.update(dict.fromkeys(PROBE_AREAS, probe_span))
        ctx.note_parts(both[0].job_id, areas)
        return IntraNodeRun(
            [sweep for p in parts for sweep in p.sweeps.value],
            [p.sweeps.telemetry for p in parts if p.sweeps.telemetry is not None],
            [p.ceiling for p in parts if p.ceiling is not None] if ceilings is not None else None,
            both[0].job_id,
            probes if probe else None,
        )
    if pairs is not None and fn is collective_sweeps:
        riding = ctx.run(sweeps_then_pairs, spec, rounds=pairs.rounds, pairs=dict(pairs.args), **kwargs)
        return IntraNodeRun(
            [sweep for r in riding for sweep in r.value.sweeps],
            [],
            None,
            riding[0].job_id,
            pairs=[p for r in riding for p in r.value.pairs],
        )
    if not sampled:
        plain = ctx.run(fn, spec, **kwargs)
        return IntraNodeRun([sweep for r in plain for sweep in r.value], [], None, plain[0].job_id)
    wrapped = ctx.run(under_telemetry, spec, fn=fn, **kwargs)
    return IntraNodeRun(
        [sweep for r in wrapped for sweep in r.value.value],
        [r.value.telemetry for r in wrapped if r.value.telemetry is not None],
        None,
        wrapped[0].job_id,
    )


def check_memory(ctx: JobContext, s: NcclSettings, across: bool) -> None:
    """Refuse, before any job, sizes that do not fit a GPU's memory."""
    memory = gpu_memory_bytes(ctx.gpu_model) if ctx.profile.gpus_are_real and ctx.gpus_per_node else None
    if memory is None:
        return
    table = "nccl_across" if across and ctx.profile.nccl_across.max_bytes is not None else "nccl"
    # Out of place: input and output buffers, plus the reference the result is checked against.
    check_fits(
        3 * s.max_bytes,
        memory,
        f"[profiles.{ctx.profile.name}.{table}] max_bytes = {s.max_bytes} "
        f"(3 buffers of that size on each {ctx.gpu_model})",
    )


def _span(spans: Iterable[tuple[float, float] | None]) -> tuple[float, float]:
    """First start to last end of the tasks' spans of one phase."""
    known = [s for s in spans if s is not None]
    return (min(s[0] for s in known), max(s[1] for s in known)) if known else (0.0, 0.0)

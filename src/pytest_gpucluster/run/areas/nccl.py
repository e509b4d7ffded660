"""Collective bus bandwidth: the run's one intra-node job (every node at once, each its own
communicator, under the telemetry sampler, with the node probe and the compute ceilings riding
along where the plan says so), the across-node job, the re-measurement of a miss and the rounds of
node pairs that narrow a miss across nodes down to the bad node.

``NCCL_INTRA``'s value is two things, told apart by the test's parameters: without ``op``, the
intra-node job itself (telemetry reads what its sampler saw); with ``node`` and ``op``, that node's
judged check of that collective after its retries. One producer keeps both on the one job (the
same ``once`` key for every reader: the nccl, telemetry, compute and probe checks), where two
requests would plan a second job or a job that never runs. Judging is ``checks/nccl.py``.
"""

from __future__ import annotations

from collections.abc import Callable

from pytest_gpucluster.checks import nccl as judging
from pytest_gpucluster.checks.pairing import Pair, isolate
from pytest_gpucluster.plan import jobs
from pytest_gpucluster.run.areas.nccl_jobs import (
    IntraNodeRun,
    RidingPairs,
    inter_env,
    intra_env,
    neighbour_rounds,
    pair_args,
    run_job,
    settings,
)
from pytest_gpucluster.run.areas.nccl_rounds import rounds_check, topology_of
from pytest_gpucluster.run.context import JobContext
from pytest_gpucluster.run.produce import produces
from pytest_gpucluster.workloads.busbw import SweepResult
from pytest_gpucluster.workloads.compute import ComputePlan, plan_compute


def probe_rides_along(ctx: JobContext) -> bool:
    """Whether the plan reads the node probe (GPU health, InfiniBand, inventory, dcgmi) in the
    intra-node job, first, instead of a job of its own started ahead. The probe holds every GPU, as
    that job does; one job fewer is one start of a job fewer, and the GPUs are then free at the
    start of the run for the isolation pair."""
    return ctx.plan.rides_in(jobs.NODE_PROBE.key) == jobs.NCCL_INTRA.key


def ceilings_ride_along(ctx: JobContext) -> ComputePlan | None:
    """The compute plan when the plan measures the ceilings in the intra-node job, first, instead
    of a job of their own (two jobs one after the other would each pay the scheduler's start)."""
    if ctx.plan.rides_in(jobs.CEILINGS.key) != jobs.NCCL_INTRA.key:
        return None
    return plan_compute(ctx.profile.compute, gpus_per_node=ctx.gpus_per_node, real_gpus=ctx.profile.gpus_are_real)


def _ops(ctx: JobContext, op: str | None = None, *, across: bool = False) -> tuple[str, ...]:
    """The profile's collectives inside a node (``[nccl] ops``) or across nodes (``[nccl_across]
    ops``, alltoall among them unless set), and ``op`` if it is not one of them."""
    ops = tuple(settings(ctx, across=across).ops)
    return ops if op is None or op in ops else (*ops, op)


def intra_node_job(ctx: JobContext, ops: tuple[str, ...] | None = None) -> IntraNodeRun:
    """The run's one intra-node job (the profile's collectives, or ``ops``): every node's sweeps,
    sampled by telemetry while they run, after the node probe and the compute ceilings where those
    ride along."""
    ops = _ops(ctx) if ops is None else ops
    ceilings = ceilings_ride_along(ctx)
    probe = probe_rides_along(ctx)
    name = "probe-" * probe + "ceilings-" * (ceilings is not None) + "nccl-intra"
    return ctx.once(
        ("nccl", "intra_node", ops),
        lambda: run_job(
            ctx, name, groups="node", ops=ops, env=intra_env(ctx), sampled=True, ceilings=ceilings, probe=probe
        ),
    )


@produces(jobs.NCCL_INTRA)
def intra_node(ctx: JobContext, node: str | None = None, op: str | None = None) -> IntraNodeRun | judging.Check:
    """Without ``op``: the intra-node job. With ``node`` and ``op``: ``op`` inside ``node`` from
    that job, shared by every per-node test of the run; a miss is re-measured on that node alone."""
    if op is None:
        return intra_node_job(ctx)
    assert node is not None, "the intra-node check of a collective names its node"
    first = judging.find(intra_node_job(ctx, _ops(ctx, op)).sweeps, (node,), op)

    def again() -> SweepResult:
        redo = run_job(
            ctx,
            "nccl-intra-retry",
            groups="node",
            ops=(op,),
            env=intra_env(ctx, "intra-retry"),
            nodelist=(node,) if ctx.profile.executor == "slurm" else None,
        ).sweeps
        return judging.find(redo, (node,), op)

    metric = judging.metric_name(op, "intra_node", nvls=ctx.profile.nccl.nvls)
    return _with_retries(ctx, first, metric, again)


def pairs_ride_along(ctx: JobContext) -> RidingPairs | None:
    """The neighbour pairs' rounds and sizes where the plan has them ride in the across-node job,
    after its sweeps (one start of a job fewer)."""
    if ctx.plan.rides_in(jobs.NEIGHBOUR_PAIRS.key) != jobs.NCCL_INTER.key:
        return None
    return RidingPairs(neighbour_rounds(ctx.nodes), pair_args(ctx))


def inter_node_job(ctx: JobContext, ops: tuple[str, ...] | None = None) -> IntraNodeRun:
    """The run's one across-node job (the collectives judged across nodes, or ``ops``), with the
    neighbour pairs after its sweeps where they ride along."""
    ops = _ops(ctx, across=True) if ops is None else ops
    pairs = pairs_ride_along(ctx)
    return ctx.once(
        ("nccl", "inter_node", ops),
        lambda: run_job(ctx, "nccl-inter", groups="world", ops=ops, env=inter_env(ctx), pairs=pairs),
    )


@produces(jobs.NCCL_INTER)
def inter_node(ctx: JobContext, op: str) -> judging.Check:
    """``op`` over every tested node on one communicator on ``[nccl] inter_node_algo`` (Ring
    unless the profile says otherwise), so busbw is the network's and not inflated by tree or
    NVLS algorithms. A miss is re-measured; one that stays is narrowed down by pairs. Where the
    switch tree is known, the rounds over it run instead (``run/areas/nccl_rounds.py``)."""
    ops = _ops(ctx, op, across=True)
    topology = topology_of(ctx)
    if topology is not None:
        return rounds_check(ctx, topology, ops, op)
    nodes = tuple(ctx.nodes)
    all_ops = inter_node_job(ctx, ops).sweeps

    def again() -> SweepResult:
        redo = run_job(ctx, "nccl-inter-retry", groups="world", ops=(op,), env=inter_env(ctx, "inter-retry")).sweeps
        return judging.find(redo, nodes, op)

    metric = judging.metric_name(op, "inter_node", nvls=ctx.profile.nccl.nvls)
    check = _with_retries(ctx, judging.find(all_ops, nodes, op), metric, again)
    return isolate_bad_nodes(ctx, check) if judging.needs_isolation(check) else check


def _check(
    ctx: JobContext, sweep: SweepResult, metric: str, attempts: list[SweepResult] | None = None
) -> judging.Check:
    s = settings(ctx, across=judging.is_across(metric))
    return judging.make_check(sweep, metric, ctx.thresholds.get(metric), s, attempts or ())


def _with_retries(ctx: JobContext, first: SweepResult, metric: str, again: Callable[[], SweepResult]) -> judging.Check:
    """Re-measure a performance miss up to ``retries`` times (``checks.nccl.needs_retry``)."""
    retries = settings(ctx, across=judging.is_across(metric)).retries
    attempts = [first]
    check = _check(ctx, first, metric, attempts)
    while judging.needs_retry(check, len(attempts), retries):
        attempts.append(again())
        check = _check(ctx, attempts[-1], metric, attempts)
    return check


def isolate_bad_nodes(ctx: JobContext, check: judging.Check) -> judging.Check:
    """Pair the nodes (one job per round, every pair its own communicator, all at once) and
    re-pair failed ones with known-good nodes; the culprit goes into the measurement's detail."""
    op = check.sweep.op
    s = settings(ctx, across=True)
    judge_from = min(s.judge_from_bytes, s.max_bytes)

    def run_round(pairs: list[Pair]) -> dict[Pair, bool]:
        found = run_job(
            ctx,
            "nccl-pairs",
            groups=[list(p) for p in pairs],
            ops=(op,),
            env=inter_env(ctx, "pairs"),
            min_bytes=judge_from,
        ).sweeps
        return {p: judging.pair_passes(_check(ctx, judging.find(found, p, op), check.metric)) for p in pairs}

    return judging.with_isolation(check, isolate(ctx.live_nodes, run_round))

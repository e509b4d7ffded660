"""The fabric layer by layer: all_reduce kept to NVLink alone inside every node, kept to the
network alone inside every node and across all nodes, and neighbour node pairs exchanging at once
(the straggler check). Each is a job of its own declaration (``plan/jobs.py``), its environment
there; these producers give the jobs their sizes and the pairs their rounds. Judging is
``checks/nccl.py`` (the sweeps) and ``checks/straggler.py`` (the pairs).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pytest_gpucluster.checks import nccl as judging
from pytest_gpucluster.checks.pairing import Pair
from pytest_gpucluster.plan import facts, jobs
from pytest_gpucluster.plan.jobs import JobRequest
from pytest_gpucluster.run.areas import nccl
from pytest_gpucluster.run.areas.nccl_jobs import (
    check_memory,
    inter_env,
    intra_env,
    nccl_log_env,
    neighbour_rounds,
    pair_args,
    settings,
)
from pytest_gpucluster.run.context import JobContext
from pytest_gpucluster.run.produce import produces, spec_of
from pytest_gpucluster.workloads.busbw import SweepResult
from pytest_gpucluster.workloads.pair_exchange import PairResult

OP = "all_reduce"
NVLINK_ONLY = f"nccl.{OP}.nvlink_only"
NETWORK_ONLY = f"nccl.{OP}.network_only"
NETWORK_ONLY_ACROSS = f"nccl.{OP}.network_only_inter_node"


@dataclass(frozen=True)
class NeighbourPairs:
    """The straggler check's job: its rounds of pairs and every pair's figures."""

    rounds: tuple[tuple[Pair, ...], ...]
    results: tuple[PairResult, ...]
    job_id: str


def _sweeps(
    ctx: JobContext, request: JobRequest, *, across: bool, env: dict[str, str], **communicators: Any
) -> list[SweepResult]:
    """``request``'s job: all_reduce at the judged sizes only (from ``judge_from_bytes`` up) on
    the communicators its workload takes (``groups`` or ``layouts``), with the declared
    environment under ``env``."""
    s = settings(ctx, across=across)
    check_memory(ctx, s, across)
    results = ctx.run(
        request.workload,  # type: ignore[arg-type]
        spec_of(ctx, request, env=env),
        ops=(OP,),
        min_bytes=s.judge_from_bytes,
        max_bytes=s.max_bytes,
        warmup_iters=s.warmup_iters,
        iters=s.iters,
        timeout_s=s.timeout_s,
        **communicators,
    )
    return [sweep for r in results for sweep in r.value]


def _judged(ctx: JobContext, sweep: SweepResult, metric: str, *, across: bool) -> judging.Check:
    return judging.make_check(sweep, metric, ctx.thresholds.get(metric), settings(ctx, across=across))


@produces(jobs.NCCL_NVLINK_ONLY)
def nvlink_only(ctx: JobContext, node: str) -> judging.Check:
    """``node``'s all_reduce on NVLink alone, from the one job over every node (each its own
    communicator); not re-measured: a miss is the node's NVLink or its GPUs' peer access."""
    sweeps = ctx.once(
        ("nccl", "nvlink_only"),
        lambda: _sweeps(ctx, jobs.NCCL_NVLINK_ONLY, across=False, env=intra_env(ctx, "nvlink-only"), groups="node"),
    )
    return _judged(ctx, judging.find(sweeps, (node,), OP), NVLINK_ONLY, across=False)


@produces(jobs.NCCL_NETWORK_ONLY)
def network_only(ctx: JobContext, node: str | None = None) -> judging.Check:
    """All_reduce with every GPU through its NIC: ``node``'s own, or without ``node`` all nodes on
    one communicator (Ring unless the profile says otherwise), from one job that runs both."""
    inside = facts.no_intra_node_collective(ctx.gpus_per_node) is None
    layouts = (("node",) if inside else ()) + (("world",) if len(ctx.nodes) > 1 else ())
    sweeps = ctx.once(
        ("nccl", "network_only"),
        lambda: _sweeps(ctx, jobs.NCCL_NETWORK_ONLY, across=True, env=inter_env(ctx, "network-only"), layouts=layouts),
    )
    if node is not None:
        return _judged(ctx, judging.find(sweeps, (node,), OP), NETWORK_ONLY, across=True)
    return _judged(ctx, judging.find(sweeps, tuple(ctx.nodes), OP), NETWORK_ONLY_ACROSS, across=True)


@produces(jobs.NEIGHBOUR_PAIRS)
def neighbour_pairs(ctx: JobContext) -> NeighbourPairs:
    """Every node paired with its ring neighbours (``checks.pairing.neighbour_rounds``), each
    round's pairs exchanging at once: after the across-node sweeps in their job where the plan has
    them ride there, else all rounds in a job of their own."""
    rounds = neighbour_rounds(ctx.nodes)
    if nccl.pairs_ride_along(ctx) is not None:
        inter = nccl.inter_node_job(ctx)
        return NeighbourPairs(rounds, tuple(inter.pairs or ()), inter.job_id)

    def run() -> NeighbourPairs:
        s = settings(ctx, across=True)
        found = ctx.run(
            jobs.NEIGHBOUR_PAIRS.workload,  # type: ignore[arg-type]
            spec_of(ctx, jobs.NEIGHBOUR_PAIRS, env=nccl_log_env(ctx, "pairs")),
            rounds=rounds,
            timeout_s=s.timeout_s,
            **pair_args(ctx),
        )
        return NeighbourPairs(rounds, tuple(p for r in found for p in r.value), found[0].job_id)

    return ctx.once(("nccl", "neighbour_pairs"), run)

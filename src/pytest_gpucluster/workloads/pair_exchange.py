"""Send/recv between node pairs, every pair of a round at once: the straggler check's workload.

Each round names disjoint node pairs; in a round, every rank exchanges buffers with the rank of
the same local index on its partner node (both directions at once, ``batch_isend_irecv``), first a
small message for the latency, then a large one for the bandwidth. A node in no pair of a round
waits for the round to end. Rank 0 returns one ``PairResult`` per pair and round, every other rank
an empty list. NCCL on GPUs, gloo on CPU, as the collective sweeps. Where NCCL writes its INFO
lines to a file, each pair's result names the NICs its GPUs went through (``nccl_log.nics_of``).
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_gpucluster.workloads.collectives import _gather_into, _members
from pytest_gpucluster.workloads.context import TaskContext
from pytest_gpucluster.workloads.distributed import device_for, process_group
from pytest_gpucluster.workloads.nccl_log import GpuNics, NcclLog, nccl_debug_file, nics_of, parse_nccl_log

Round = Sequence[Sequence[str]]  # disjoint pairs of node names


@dataclass(frozen=True)
class PairResult:
    """One pair of one round: the slowest rank's figures (a pair is as slow as its slowest lane)."""

    nodes: tuple[str, str]
    round: int  # 0-based
    latency_ms: float  # mean time of one exchange of ``latency_bytes``
    busbw: float  # GB/s each way at ``bandwidth_bytes``
    n_ranks: int
    backend: str
    latency_bytes: int
    bandwidth_bytes: int
    iters: int
    wrong: int  # elements received with another value than the partner sent
    nics: tuple[GpuNics, ...] = ()  # the pair's GPUs and the NICs NCCL's log says they went through


def _exchange(dist: Any, send: Any, recv: Any, peer: int) -> None:
    ops = [dist.P2POp(dist.isend, send, peer), dist.P2POp(dist.irecv, recv, peer)]
    for request in dist.batch_isend_irecv(ops):
        request.wait()


def _time(torch: Any, dist: Any, send: Any, recv: Any, peer: int, warmup: int, iters: int, cuda: bool) -> float:
    """Seconds per exchange: ``iters`` exchanges back to back after ``warmup``."""
    for _ in range(warmup):
        _exchange(dist, send, recv, peer)
    if cuda:
        torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(iters):
        _exchange(dist, send, recv, peer)
    if cuda:
        torch.cuda.synchronize()
    return (time.perf_counter() - start) / iters


def exchange_rounds(
    ctx: TaskContext,
    *,
    rounds: Sequence[Round],
    latency_bytes: int = 8 * 2**10,
    bandwidth_bytes: int = 64 * 2**20,
    warmup_iters: int = 3,
    iters: int = 10,
    backend: str | None = None,
    timeout_s: float = 300.0,
) -> list[PairResult]:
    """Every round's pairs exchanging at once, round after round (see the module's docstring)."""
    import torch as _torch
    import torch.distributed as _dist

    torch: Any = _torch
    dist: Any = _dist
    with process_group(ctx, backend=backend, timeout_s=timeout_s) as be:
        cuda = be == "nccl"
        device = device_for(ctx, be)
        if not cuda:
            torch.set_num_threads(1)
        members = _members(torch, dist, ctx, device)
        me = members[dist.get_rank()]
        rank_of = {(m.node, m.local_rank): m.rank for m in members}
        world = dist.get_world_size()
        results: list[PairResult] = []
        for index, pairs in enumerate(rounds):
            partner = next((b if a == me.node else a for a, b in pairs if me.node in (a, b)), None)
            peer = rank_of.get((partner, me.local_rank)) if partner is not None else None
            mine = torch.zeros(3, dtype=torch.float64, device=device)  # latency s, bandwidth s, wrong
            if peer is not None:
                small_send = torch.full((latency_bytes // 4,), float(me.rank + 1), device=device)
                small_recv = torch.empty_like(small_send)
                mine[0] = _time(torch, dist, small_send, small_recv, peer, warmup_iters, iters, cuda)
                send = torch.full((bandwidth_bytes // 4,), float(me.rank + 1), device=device)
                recv = torch.full_like(send, -1.0)
                mine[1] = _time(torch, dist, send, recv, peer, warmup_iters, iters, cuda)
                mine[2] = float((recv != float(peer + 1)).sum().item())
                del small_send, small_recv, send, recv
                if cuda:
                    torch.cuda.empty_cache()
            everyone = torch.zeros(3 * world, dtype=torch.float64, device=device)
            _gather_into(dist)(everyone, mine)
            rows = everyone.view(world, 3).tolist()
            for a, b in pairs:
                lanes = [rows[m.rank] for m in members if m.node in (a, b) and rows[m.rank][1] > 0]
                if not lanes:
                    continue
                slowest = max(lane[1] for lane in lanes)
                results.append(
                    PairResult(
                        nodes=(a, b),
                        round=index,
                        latency_ms=max(lane[0] for lane in lanes) * 1e3,
                        busbw=bandwidth_bytes / slowest / 1e9,
                        n_ranks=len(lanes),
                        backend=be,
                        latency_bytes=latency_bytes,
                        bandwidth_bytes=bandwidth_bytes,
                        iters=iters,
                        wrong=int(sum(lane[2] for lane in lanes)),
                    )
                )
        log_file = nccl_debug_file(os.environ, os.getpid(), ctx.hostname) if cuda else None
        if log_file is not None:
            results = _with_nics(dist, results, log_file, me.node, me.local_rank)
        dist.barrier()
        return results if dist.get_rank() == 0 else []


def _with_nics(dist: Any, results: list[PairResult], path: str, node: str, gpu: int) -> list[PairResult]:
    """``results`` with every pair's GPUs and their NICs, each rank's read from its own log."""
    try:
        log = parse_nccl_log(Path(path).read_text(encoding="utf-8", errors="replace"))
    except OSError:
        log = NcclLog()
    everyone: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(everyone, nics_of(log, node, gpu))
    return [dataclasses.replace(r, nics=tuple(g for g in everyone if g.node in r.nodes)) for r in results]


@dataclass(frozen=True)
class SweepsAndPairs:
    """One task's part of a job of sweeps with the neighbour pairs riding after them."""

    sweeps: list[Any]  # workloads.busbw.SweepResult
    pairs: list[PairResult]


def sweeps_then_pairs(
    ctx: TaskContext,
    *,
    rounds: Sequence[Round],
    pairs: dict[str, Any],
    backend: str | None = None,
    timeout_s: float = 300.0,
    **sweep: Any,
) -> SweepsAndPairs:
    """The collective sweeps, then the neighbour pairs' rounds (``pairs``: their sizes and
    repetitions) on the same process group: one job where two would each pay a start."""
    from pytest_gpucluster.workloads.collectives import collective_sweeps

    with process_group(ctx, backend=backend, timeout_s=timeout_s):
        found = collective_sweeps(ctx, backend=backend, timeout_s=timeout_s, **sweep)
        return SweepsAndPairs(found, exchange_rounds(ctx, rounds=rounds, backend=backend, timeout_s=timeout_s, **pairs))

"""Collective bus bandwidth through torch.distributed, measured the way nccl-tests measures it.

NCCL on GPUs, gloo on CPU: the same function runs on an H100 node and on a laptop. One job can
hold several communicators at once (every node its own, or node pairs), so a slow node is named
by the group it was measured in, not by a global average.

Per size (``-b``..``-e``, ``-f 2``) and placement: buffers allocated once, ``warmup_iters`` calls,
a barrier, one call that aligns the ranks, then ``iters`` calls issued back to back between two
CUDA events (perf_counter on CPU); the time is the slowest rank's mean per call. Then, like
nccl-tests ``-c 1``, the buffers are filled with fresh deterministic data, the collective runs
once more and every element is compared with its exact expected value (small integers, exact in
float32).

Every sweep records the NCCL_ALGO and NCCL_PROTO in force and, where the job has NCCL write its INFO
lines to a file (``NCCL_DEBUG_FILE``), the network and transports those lines name for the group.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_gpucluster.workloads.busbw import (
    OPS,
    SizeResult,
    SweepResult,
    algbw_gbps,
    busbw_gbps,
    merge_rows,
    plan_sizes,
    shape_for,
)
from pytest_gpucluster.workloads.collective_data import compare, fill
from pytest_gpucluster.workloads.context import TaskContext
from pytest_gpucluster.workloads.distributed import device_for, process_group
from pytest_gpucluster.workloads.nccl_log import GpuNics, NcclLog, merge_logs, nccl_debug_file, nics_of, parse_from

# Environment facts worth keeping with a bandwidth: they change what NCCL does.
ENV_FACTS = (
    "NCCL_ALGO",
    "NCCL_PROTO",
    "NCCL_NVLS_ENABLE",
    "NCCL_IB_HCA",
    "NCCL_SOCKET_IFNAME",
    "NCCL_NET_GDR_LEVEL",
    "NCCL_P2P_LEVEL",
    "NCCL_P2P_DISABLE",
    "NCCL_SHM_DISABLE",
    "NCCL_NET",
    "NCCL_MIN_NCHANNELS",
    "NCCL_MAX_NCHANNELS",
    "NCCL_BUFFSIZE",
    "NCCL_CROSS_NIC",
    "NCCL_COLLNET_ENABLE",
    "CUDA_VISIBLE_DEVICES",
)
_SENTINEL = -1.0  # what an output holds before the checked run: a collective that did nothing is wrong

Groups = str | Sequence[Sequence[str]]  # "node", "world", or explicit groups of node names


@dataclass(frozen=True)
class _Member:
    rank: int
    node: str
    local_rank: int


# --------------------------------------------------------------------------- one collective


@dataclass
class _Case:
    """Buffers of one size and the calls that run the collective on them."""

    run_out_of_place: Callable[[], Any] | None
    run_in_place: Callable[[], Any] | None
    prepare: Callable[[bool], Any]  # fresh data before the checked run (arg: in_place)
    result: Callable[[bool], Any]  # the tensor holding this rank's result


def _resolve(
    dist: Any, backend: str, op: str, group: Any, device: Any, n: int, force_fallback: bool = False
) -> tuple[Callable[..., Any], str]:
    """The call for ``op`` on this backend, probed on a tiny buffer; falls back when the backend
    has no such collective (gloo lacked reduce_scatter_tensor before torch 2.13)."""
    import torch

    if op == "all_gather":
        name = "all_gather_single" if hasattr(dist, "all_gather_single") else "all_gather_into_tensor"
        native: Callable[..., Any] = getattr(dist, name)
        probe_out, probe_in = torch.zeros(4 * n, device=device), torch.zeros(4, device=device)

        def fallback(out: Any, inp: Any, group: Any = None, async_op: bool = False) -> Any:
            return dist.all_gather(list(out.chunk(n)), inp, group=group, async_op=async_op)

        fb_name = "all_gather(list of views) (backend lacks all_gather_into_tensor)"
    elif op == "reduce_scatter":
        name = "reduce_scatter_single" if hasattr(dist, "reduce_scatter_single") else "reduce_scatter_tensor"
        native = getattr(dist, name)
        probe_out, probe_in = torch.zeros(4, device=device), torch.zeros(4 * n, device=device)
        rank = dist.get_rank(group)
        scratch: dict[int, Any] = {}

        def fallback(out: Any, inp: Any, group: Any = None, async_op: bool = False) -> Any:
            # all_reduce the whole input, keep this rank's chunk: the same result as a
            # reduce_scatter, not the same traffic (its busbw is not a reduce_scatter's)
            key = inp.numel()
            if key not in scratch:
                scratch.clear()
                scratch[key] = torch.empty_like(inp)
            work = scratch[key]
            work.copy_(inp)
            dist.all_reduce(work, group=group)
            out.copy_(work.narrow(0, rank * out.numel(), out.numel()))

        fb_name = "all_reduce + slice (backend lacks reduce_scatter_tensor; busbw is not a reduce_scatter's)"
    else:
        calls = {"all_reduce": dist.all_reduce, "alltoall": dist.all_to_all_single, "broadcast": dist.broadcast}
        names = {"all_reduce": "all_reduce", "alltoall": "all_to_all_single", "broadcast": "broadcast(root 0)"}
        return calls[op], names[op]
    if force_fallback:
        return fallback, f"{fb_name}: forced"
    try:
        native(probe_out, probe_in, group=group)
        return native, name
    except (RuntimeError, NotImplementedError, ValueError) as exc:
        if backend == "nccl":
            raise
        return fallback, f"{fb_name}: {type(exc).__name__}"


def _case(
    torch: Any,
    dist: Any,
    op: str,
    call: Callable[..., Any],
    group: Any,
    rank: int,
    n: int,
    count: int,
    total: int,
    device: Any,
    async_ok: bool,
) -> _Case:
    """Allocate the buffers of one size once; both placements reuse them."""
    g = {"group": group}
    if async_ok:
        g["async_op"] = True
    if op in ("all_reduce", "broadcast"):
        buf = torch.empty(count, device=device)
        reducing = op == "all_reduce"
        args = (buf,) if op == "all_reduce" else (buf, dist.get_global_rank(group, 0) if group else 0)
        return _Case(
            run_out_of_place=None,  # torch.distributed offers these in place only
            run_in_place=lambda: call(*args, **g),
            prepare=lambda _ip: fill(torch, buf, reducing, rank),
            result=lambda _ip: buf,
        )
    c = count
    if op == "all_gather":
        out, inp = torch.empty(total, device=device), torch.empty(c, device=device)
        mine = out.narrow(0, rank * c, c)

        def prep_ag(in_place: bool) -> None:
            out.fill_(_SENTINEL)
            fill(torch, mine if in_place else inp, False, rank)

        return _Case(lambda: call(out, inp, **g), lambda: call(out, mine, **g), prep_ag, lambda _ip: out)
    if op == "reduce_scatter":
        inp, out = torch.empty(total, device=device), torch.empty(c, device=device)
        mine = inp.narrow(0, rank * c, c)

        def prep_rs(in_place: bool) -> None:
            out.fill_(_SENTINEL)
            fill(torch, inp, True, rank)

        return _Case(lambda: call(out, inp, **g), lambda: call(mine, inp, **g), prep_rs, lambda ip: mine if ip else out)
    # alltoall: NCCL has no in-place form through torch
    inp, out = torch.empty(total, device=device), torch.empty(total, device=device)

    def prep_a2a(in_place: bool) -> None:
        out.fill_(_SENTINEL)
        fill(torch, inp, False, rank)

    return _Case(lambda: call(out, inp, **g), None, prep_a2a, lambda _ip: out)


def _timed(torch: Any, dist: Any, run: Callable[[], Any], iters: int, group: Any, cuda: bool) -> float:
    """Seconds per call on this rank: ``iters`` calls back to back after a barrier. On GPUs the
    clock starts when one more call, issued first, has completed: that call ends only once every
    rank has joined it, so the window holds neither the ranks' skew in leaving the barrier nor a
    host that was late to issue its first calls (one process per GPU, unlike nccl-tests ``-g N``,
    which issues every GPU's call from one thread), only calls already queued back to back."""
    dist.barrier(group=group)
    if cuda:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        first = run()
        if first is not None:
            first.wait()  # the current stream, and so the start event, waits for it
        start.record()
        works = [run() for _ in range(iters)]
        for w in works:  # makes the current stream wait for the collective stream
            if w is not None:
                w.wait()
        end.record()
        end.synchronize()
        return float(start.elapsed_time(end)) / 1e3 / iters
    t0 = time.perf_counter()
    for _ in range(iters):
        w = run()
        if w is not None:
            w.wait()
    return (time.perf_counter() - t0) / iters


def _sweep_one(
    torch: Any,
    dist: Any,
    *,
    op: str,
    backend: str,
    group: Any,
    sizes: Sequence[int],
    warmup_iters: int,
    iters: int,
    device: Any,
    corrupt: bool,
    force_fallback: bool = False,
) -> tuple[str, list[SizeResult], int]:
    """Every size of ``op`` on ``group``; returns (implementation, rows, wrong elements here)."""
    cuda = backend == "nccl"
    n, rank = dist.get_world_size(group), dist.get_rank(group)
    call, implementation = _resolve(dist, backend, op, group, device, n, force_fallback)
    rows: list[SizeResult] = []
    wrong_here = 0
    for size in sizes:
        shape = shape_for(op, n, size)
        if shape.count == 0:
            continue
        case = _case(
            torch,
            dist,
            op,
            call,
            group,
            rank,
            n,
            shape.count,
            shape.total_elements,
            device,
            async_ok=cuda and not implementation.startswith(("all_reduce +", "all_gather(")),
        )
        for in_place, run in ((False, case.run_out_of_place), (True, case.run_in_place)):
            if run is None:
                continue
            case.prepare(in_place)
            for _ in range(warmup_iters):
                w = run()
                if w is not None:
                    w.wait()
            seconds = _timed(torch, dist, run, iters, group, cuda)
            # nccl-tests -c 1: fresh data, one more call, compare every element
            case.prepare(in_place)
            w = run()
            if w is not None:
                w.wait()
            out = case.result(in_place)
            if corrupt:
                out.view(-1)[out.numel() // 2] += 1.0  # test hook: a rank that computes wrong
            wrong, max_err = compare(torch, op, out, rank, n, shape.count)
            wrong_here += wrong
            stats = torch.tensor([seconds, float(wrong), max_err], dtype=torch.float64, device=device)
            slowest = stats[:1].clone()
            dist.all_reduce(slowest, op=dist.ReduceOp.MAX, group=group)
            total_wrong = stats[1:2].clone()
            dist.all_reduce(total_wrong, group=group)
            worst = stats[2:3].clone()
            dist.all_reduce(worst, op=dist.ReduceOp.MAX, group=group)
            t = float(slowest.item())
            rows.append(
                SizeResult(
                    size_bytes=shape.size_bytes,
                    count=shape.count,
                    in_place=in_place,
                    time_us=t * 1e6,
                    algbw=algbw_gbps(shape.size_bytes, t),
                    busbw=busbw_gbps(op, n, shape.size_bytes, t),
                    wrong=int(total_wrong.item()),
                    max_error=float(worst.item()),
                )
            )
        del case
        if cuda:
            torch.cuda.synchronize()
    return implementation, rows, wrong_here


# --------------------------------------------------------------------------- groups


def _gather_into(dist: Any) -> Callable[..., Any]:
    # torch 2.13 renamed all_gather_into_tensor (now deprecated); older releases have only that
    gather: Callable[..., Any] = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
    return gather


def _members(torch: Any, dist: Any, ctx: TaskContext, device: Any) -> list[_Member]:
    """Every rank's node name and local rank, gathered (the launcher's layout is not assumed)."""
    mine = torch.tensor([ctx.node_rank, ctx.local_rank], dtype=torch.int64, device=device)
    world = dist.get_world_size()
    everyone = torch.zeros(2 * world, dtype=torch.int64, device=device)
    _gather_into(dist)(everyone, mine)
    pairs = everyone.view(world, 2).tolist()
    names = ctx.hostnames

    def name(node_rank: int) -> str:
        return names[node_rank] if 0 <= node_rank < len(names) else f"node{node_rank}"

    return [_Member(r, name(nr), lr) for r, (nr, lr) in enumerate(pairs)]


def _rank_groups(members: Sequence[_Member], groups: Groups) -> list[tuple[tuple[str, ...], list[int]]]:
    """(node names, ranks) of every communicator to build, identical on every rank."""
    order = list(dict.fromkeys(m.node for m in members))
    if groups == "world":
        return [(tuple(order), [m.rank for m in members])]
    if groups == "node":
        return [((node,), [m.rank for m in members if m.node == node]) for node in order]
    out = []
    for nodes in groups:
        unknown = [n for n in nodes if n not in order]
        if unknown:
            raise ValueError(f"group {list(nodes)} names nodes not in this job: {unknown}; the job has {order}")
        out.append((tuple(nodes), [m.rank for m in members if m.node in nodes]))
    return out


def collective_sweeps(
    ctx: TaskContext,
    *,
    ops: Sequence[str] = ("all_reduce", "all_gather", "reduce_scatter"),
    min_bytes: int = 2**20,
    max_bytes: int = 2**30,
    warmup_iters: int = 5,
    iters: int = 20,
    groups: Groups = "world",
    backend: str | None = None,
    timeout_s: float = 600.0,
    corrupt_rank: int | None = None,
    force_fallback: bool = False,
) -> list[SweepResult]:
    """Sweep ``ops`` over sizes on every communicator of ``groups`` at once.

    ``groups``: ``"world"`` (one communicator over the job), ``"node"`` (each node its own) or
    explicit groups of node names (e.g. pairs); nodes of the job in no group idle. Each group's
    first rank returns that group's results, every other rank an empty list. ``corrupt_rank``
    (tests only) makes that global rank's results wrong after every checked call;
    ``force_fallback`` (tests only) uses the fallbacks for backends that lack a collective.
    """
    import torch as _torch
    import torch.distributed as _dist

    torch: Any = _torch  # untyped use: the CPU and CUDA wheels differ in what they declare
    dist: Any = _dist
    if isinstance(groups, str) and groups not in ("world", "node"):
        raise ValueError(f"groups={groups!r}: use 'world', 'node' or a list of node-name groups")
    unknown = [op for op in ops if op not in OPS]
    if unknown:
        raise ValueError(f"unknown collectives {unknown}; known: {', '.join(OPS)}")
    with process_group(ctx, backend=backend, timeout_s=timeout_s) as be:
        device = device_for(ctx, be)
        if be != "nccl":
            # CPU ranks stand in for GPUs: one core each, so a node's ranks (and the nodes sharing
            # a host in the test cluster) do not crowd each other with a full thread pool apiece.
            torch.set_num_threads(1)
        members = _members(torch, dist, ctx, device)
        layout = _rank_groups(members, groups)
        log_file = nccl_debug_file(os.environ, os.getpid(), ctx.hostname) if be == "nccl" else None
        # A group of its own is connected from here on: what NCCL wrote before is the world's.
        log_from = 0 if groups == "world" else _size_of(log_file)
        if groups == "world":
            group, nodes = dist.group.WORLD, layout[0][0]
        else:
            # every rank creates every group, in the same order, as torch requires
            mine, _all = dist.new_subgroups_by_enumeration([ranks for _, ranks in layout])
            group = mine
            nodes = next((names for names, ranks in layout if ctx.rank in ranks), ())
        if group is None or not nodes:
            dist.barrier()  # an idle node still waits for the others before the group ends
            return []
        plan = plan_sizes(min_bytes, max_bytes, be)
        notes = (plan.note,) if plan.note else ()
        env = {k: os.environ[k] for k in ENV_FACTS if k in os.environ}
        algo, proto = (env.get("NCCL_ALGO"), env.get("NCCL_PROTO")) if be == "nccl" else (None, None)
        version = None
        if be == "nccl":
            v = torch.cuda.nccl.version()
            version = ".".join(str(x) for x in v) if isinstance(v, tuple) else str(v)
        group_members = [members[r] for r in dist.get_process_group_ranks(group)]
        results = []
        for op in ops:
            implementation, rows, wrong_here = _sweep_one(
                torch,
                dist,
                op=op,
                backend=be,
                group=group,
                sizes=plan.sizes,
                warmup_iters=warmup_iters,
                iters=iters,
                device=device,
                corrupt=corrupt_rank == ctx.rank,
                force_fallback=force_fallback,
            )
            wrong_places = _wrong_places(torch, dist, group, rows, wrong_here, group_members, be, device)
            op_notes: tuple[str, ...] = notes
            if op in ("all_reduce", "broadcast"):
                op_notes += ("in place only: torch.distributed has no out-of-place form",)
            elif op == "alltoall":
                op_notes += ("out of place only: NCCL has no in-place alltoall",)
            results.append(
                SweepResult(
                    op=op,
                    nodes=tuple(nodes),
                    n_ranks=len(group_members),
                    backend=be,
                    implementation=implementation,
                    rows=merge_rows(rows),
                    warmup_iters=warmup_iters,
                    iters=iters,
                    nccl_version=version,
                    env=env,
                    notes=op_notes,
                    wrong_places=wrong_places,
                    nccl_algo=algo,
                    nccl_proto=proto,
                )
            )
            if be == "nccl":
                torch.cuda.empty_cache()
        if log_file is not None:
            me = members[ctx.rank]
            log, nics = _group_log(dist, group, log_file, log_from, me.node, me.local_rank)
            results = [
                dataclasses.replace(r, transports=log.transports, network=log.network, nics=nics) for r in results
            ]
        dist.barrier()
        return results if dist.get_rank(group) == 0 else []


def _size_of(path: str | None) -> int:
    try:
        return Path(path).stat().st_size if path else 0
    except OSError:
        return 0


def _group_log(
    dist: Any, group: Any, path: str, start: int, node: str, gpu: int
) -> tuple[NcclLog, tuple[GpuNics, ...]]:
    """What every rank of ``group`` read in its own NCCL INFO lines from byte ``start`` on, merged,
    and every rank's GPU with the NICs its network channels went through (``node``, ``gpu``: this
    rank's); each rank's NCCL WARN lines go to its stderr, where the job's log keeps them."""
    try:
        with open(path, "rb") as f:
            mine = parse_from(f.read(), start)
    except OSError:
        mine = NcclLog()
    for line in mine.warnings:
        print(line, file=sys.stderr)
    everyone: list[Any] = [None] * dist.get_world_size(group)
    facts = (mine.version, mine.network, mine.transports, nics_of(mine, node, gpu))
    dist.all_gather_object(everyone, facts, group=group)
    merged = merge_logs(NcclLog(v, n, tuple(t)) for v, n, t, _ in everyone)
    return merged, tuple(nics for *_, nics in everyone)


def _wrong_places(
    torch: Any,
    dist: Any,
    group: Any,
    rows: list[SizeResult],
    wrong_here: int,
    members: list[_Member],
    backend: str,
    device: Any,
) -> tuple[str, ...]:
    """Which ranks of ``group`` computed a wrong result, as ``node:gpuN`` (``node:rankN`` on CPU)."""
    if all(r.wrong == 0 for r in rows):
        return ()
    # rows hold group sums, the same on every rank, so every rank of the group takes this branch
    n = len(members)
    mine = torch.tensor([wrong_here], dtype=torch.int64, device=device)
    everyone = torch.zeros(n, dtype=torch.int64, device=device)
    _gather_into(dist)(everyone, mine, group=group)
    unit = "gpu" if backend == "nccl" else "rank"
    return tuple(f"{m.node}:{unit}{m.local_rank}" for m, w in zip(members, everyone.tolist(), strict=True) if w)


def layered_sweeps(
    ctx: TaskContext,
    *,
    layouts: Sequence[Groups] = ("node", "world"),
    backend: str | None = None,
    timeout_s: float = 600.0,
    **sweep: Any,
) -> list[SweepResult]:
    """``collective_sweeps`` on each layout of ``layouts`` in turn (every node's own communicator,
    then all nodes on one) on one process group: one job where the environment, which NCCL reads
    once per process, holds for both."""
    with process_group(ctx, backend=backend, timeout_s=timeout_s):
        return [
            result
            for groups in layouts
            for result in collective_sweeps(ctx, groups=groups, backend=backend, timeout_s=timeout_s, **sweep)
        ]

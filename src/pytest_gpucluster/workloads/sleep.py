"""A workload that only waits: the long job of the plugin's own fault and interrupt tests, and a
rank that hangs on purpose (it never joins the collective the others wait in)."""

from __future__ import annotations

import socket
import time
from dataclasses import dataclass

from pytest_gpucluster.workloads.context import TaskContext


@dataclass(frozen=True)
class Slept:
    """Where a task slept and for how long."""

    node: str
    rank: int
    seconds: float


def sleep(ctx: TaskContext, seconds: float = 120.0) -> Slept:
    """Sleep ``seconds`` (in short steps, so a signal from Slurm is handled at once)."""
    start = time.monotonic()
    while time.monotonic() - start < seconds:
        time.sleep(min(1.0, seconds - (time.monotonic() - start)))
    return Slept(node=socket.gethostname(), rank=ctx.rank, seconds=time.monotonic() - start)


def hang_one_rank(ctx: TaskContext, *, hung_rank: int = 1, timeout_s: float = 5.0, hang_s: float = 600.0) -> Slept:
    """Every rank but ``hung_rank`` enters an all_reduce; ``hung_rank`` joins the group, then never
    enters it and sleeps ``hang_s``. The others' collective must fail after ``timeout_s``."""
    import torch
    import torch.distributed as dist

    from pytest_gpucluster.workloads.distributed import device_for, process_group

    with process_group(ctx, timeout_s=timeout_s) as backend:
        if ctx.rank == hung_rank:
            return sleep(ctx, hang_s)
        start = time.monotonic()
        dist.all_reduce(torch.ones(4, device=device_for(ctx, backend)))
        return Slept(node=socket.gethostname(), rank=ctx.rank, seconds=time.monotonic() - start)

"""torch.distributed set-up from a TaskContext: NCCL on GPUs, gloo on CPU, always with a timeout
so a dead or hung rank ends the job instead of the suite."""

from __future__ import annotations

import datetime as _dt
import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from pytest_gpucluster.workloads.context import TaskContext
from pytest_gpucluster.workloads.gpu_environment import check_torch_can_use_gpus
from pytest_gpucluster.workloads.net_settings import check_settings

# Set in a job's environment by the login side to choose the backend for every workload of the
# job (``gloo`` for a profile whose GPUs are not real, on a host that has some).
BACKEND_ENV = "PYTEST_GPUCLUSTER_BACKEND"


def pick_backend(requested: str | None = None) -> str:
    """What was asked for, else what the job's environment names (``BACKEND_ENV``), else
    ``nccl`` when CUDA is usable here and ``gloo`` when not. A task given GPUs that torch cannot
    use while NVML sees them never falls back to the CPU: ``TorchCannotUseGpus`` names the
    environment (``workloads.gpu_environment``)."""
    import torch

    requested = requested or os.environ.get(BACKEND_ENV)
    if requested and requested != "auto":
        return requested
    if torch.cuda.is_available() and torch.cuda.device_count() > 0:
        return "nccl"
    check_torch_can_use_gpus()
    return "gloo"


def device_for(ctx: TaskContext, backend: str) -> Any:
    """This task's device: its local rank's GPU (modulo the GPUs it can see), or the CPU."""
    import torch

    if backend == "nccl":
        return torch.device("cuda", ctx.local_rank % torch.cuda.device_count())
    return torch.device("cpu")


@contextmanager
def process_group(ctx: TaskContext, *, backend: str | None = None, timeout_s: float = 300.0) -> Iterator[str]:
    """Initialise the default process group over TCP rendezvous at rank 0's host; yields the
    backend. Destroyed on exit, also when the workload raises. Inside a group this process
    already has (one workload running another's phases in the same job), that group serves and
    stays: a second rendezvous on the same port could reach rank 0's old store before it closes."""
    import torch
    import torch.distributed as dist

    if dist.is_initialized():
        yield str(dist.get_backend())
        return
    backend = pick_backend(backend)
    check_settings(backend)  # a setting that matches nothing here is the run's configuration's fault
    kwargs: dict[str, Any] = {}
    if backend == "nccl":
        device = device_for(ctx, backend)
        torch.cuda.set_device(device)
        kwargs["device_id"] = device
    dist.init_process_group(
        backend,
        init_method=f"tcp://{ctx.master_addr}:{ctx.master_port}",
        rank=ctx.rank,
        world_size=ctx.world_size,
        timeout=_dt.timedelta(seconds=timeout_s),
        **kwargs,
    )
    try:
        yield backend
    finally:
        dist.destroy_process_group()

"""GPU isolation inside Slurm jobs, the part that runs in the job: ``gpu_view`` reads what the
task can see of the node's GPUs three ways: the scheduler's variables, NVML and (on real GPUs)
torch. ``checks.isolation`` judges the views on the login node.
"""

from __future__ import annotations

import os
import socket
import time
from dataclasses import dataclass
from pathlib import Path

from pytest_gpucluster.workloads.context import TaskContext
from pytest_gpucluster.workloads.gpu_environment import check_torch_can_use_gpus


@dataclass(frozen=True)
class Device:
    """One GPU as NVML shows it inside the job."""

    index: int  # NVML index in the job's view
    uuid: str
    minor: int  # /dev/nvidiaN: the number gres.conf files name
    processes: tuple[tuple[int, int], ...] = ()  # (pid, MiB used) of compute processes


@dataclass(frozen=True)
class GpuView:
    """What one task of a job can see of the node's GPUs."""

    node: str
    rank: int
    job_id: str
    cuda_visible_devices: str | None
    job_gpus: str | None  # SLURM_JOB_GPUS: absolute GRES indices of the job on this node
    step_gpus: str | None  # SLURM_STEP_GPUS: those of the step (per task with --gpus-per-task)
    nvml: tuple[Device, ...] | None = None  # None: not read (GRES-only) or NVML unavailable
    nvml_error: str = ""
    torch_count: int | None = None
    torch_uuids: tuple[str, ...] = ()
    pid: int = 0
    peer_seen: bool | None = None  # with a hold barrier: did the other job run at the same time
    gpus_per_task: str | None = None  # SLURM_GPUS_PER_TASK: set in a --gpus-per-task job
    gres_conf: str | None = None  # the node's gres.conf as the task reads it (None: not found)

    @property
    def where(self) -> str:
        """``node`` or ``node rank N`` for multi-task jobs."""
        return f"{self.node} (job {self.job_id}, task {self.rank})"


def _nvml_devices() -> tuple[tuple[Device, ...] | None, str]:
    try:
        import pynvml
    except ImportError:
        return None, "nvidia-ml-py is not installed on the node"
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        return None, f"NVML: {exc}"
    try:
        out = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            uuid = pynvml.nvmlDeviceGetUUID(h)
            uuid = uuid.decode() if isinstance(uuid, bytes) else str(uuid)
            try:
                procs = tuple(
                    (int(p.pid), int((p.usedGpuMemory or 0) // 2**20))
                    for p in pynvml.nvmlDeviceGetComputeRunningProcesses(h)
                )
            except pynvml.NVMLError:
                procs = ()
            out.append(Device(i, uuid, int(pynvml.nvmlDeviceGetMinorNumber(h)), procs))
        return tuple(out), ""
    except pynvml.NVMLError as exc:
        return None, f"NVML: {exc}"
    finally:
        pynvml.nvmlShutdown()


def _torch_view() -> tuple[int, tuple[str, ...]]:
    import torch

    check_torch_can_use_gpus()  # a torch that cannot use the driver is the environment's fault
    count = torch.cuda.device_count()
    uuids = []
    for i in range(count):
        raw = getattr(torch.cuda.get_device_properties(i), "uuid", None)
        if raw is not None:
            uuids.append(str(raw))
    return count, tuple(uuids)


def _hold(directory: str, mine: str, peer: str, timeout_s: float) -> bool:
    """Leave ``mine`` and wait (bounded) for a file whose name starts with ``peer``: two jobs
    prove they ran at the same time (a job of one task per GPU has several tasks per node)."""
    Path(directory, mine).touch()
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if any(name.startswith(peer) for name in os.listdir(directory)):
            return True
        time.sleep(0.2)
    return False


def gpu_view(
    ctx: TaskContext,
    *,
    real: bool = True,
    hold_dir: str | None = None,
    hold_as: str = "",
    hold_for: str = "",
    timeout_s: float = 120.0,
) -> GpuView:
    """Read this task's GPU view. NVML is read before torch so that the only processes on the
    job's GPUs are foreign ones. With ``hold_dir``, announce ``hold_as`` and wait for ``hold_for``
    (a file of any task of that job on this node) before returning, so two jobs overlap in time."""
    node = ctx.hostname or socket.gethostname()
    nvml, nvml_error = _nvml_devices() if real else (None, "")
    torch_count, torch_uuids = _torch_view() if real else (None, ())
    peer_seen = None
    if hold_dir:
        peer_seen = _hold(hold_dir, f"{hold_as}-{node}-{ctx.local_rank}", f"{hold_for}-{node}-", timeout_s)
    return GpuView(
        node=node,
        rank=ctx.rank,
        job_id=ctx.job_id,
        cuda_visible_devices=os.environ.get("CUDA_VISIBLE_DEVICES"),
        job_gpus=os.environ.get("SLURM_JOB_GPUS"),
        step_gpus=os.environ.get("SLURM_STEP_GPUS"),
        nvml=nvml,
        nvml_error=nvml_error,
        torch_count=torch_count,
        torch_uuids=torch_uuids,
        pid=os.getpid(),
        peer_seen=peer_seen,
        gpus_per_task=os.environ.get("SLURM_GPUS_PER_TASK"),
        gres_conf=_gres_conf(),
    )


GRES_CONF_LIMIT = 1 << 16  # a gres.conf is a few lines; more is not one


def _gres_conf() -> str | None:
    """The node's gres.conf, beside the slurm.conf the task's Slurm reads (``SLURM_CONF``, else
    /etc/slurm): what GRES indices mean on this node. None where it cannot be read."""
    conf = os.environ.get("SLURM_CONF") or "/etc/slurm/slurm.conf"
    try:
        with open(os.path.join(os.path.dirname(conf), "gres.conf"), encoding="utf-8", errors="replace") as f:
            return f.read(GRES_CONF_LIMIT)
    except OSError:
        return None

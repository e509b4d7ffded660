"""Who and where a task is: filled in on the node by the launcher before the workload runs."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class TaskContext:
    """One task's place in its job, as the scheduler reports it."""

    job_id: str
    rank: int
    local_rank: int
    node_rank: int
    world_size: int
    num_nodes: int
    hostname: str
    hostnames: tuple[str, ...]
    master_addr: str
    master_port: int

    @property
    def tasks_per_node(self) -> int:
        """Tasks on each node (jobs here are always homogeneous)."""
        return max(1, self.world_size // max(1, self.num_nodes))

    @property
    def visible_gpus(self) -> str | None:
        """CUDA_VISIBLE_DEVICES as the task received it (None when unset)."""
        return os.environ.get("CUDA_VISIBLE_DEVICES")


def master_port_for(job_id: str) -> int:
    """A rendezvous port derived from the job id, so concurrent jobs on one node rarely collide
    and every task of a job computes the same one without talking to the others."""
    digits = "".join(ch for ch in job_id if ch.isdigit()) or "0"
    return 20000 + int(digits) % 20000


def local_context(rank: int = 0, world_size: int = 1) -> TaskContext:
    """A context for running a workload in-process (unit tests, debugging)."""
    import socket

    host = socket.gethostname()
    return TaskContext(
        job_id="inproc",
        rank=rank,
        local_rank=rank,
        node_rank=0,
        world_size=world_size,
        num_nodes=1,
        hostname=host,
        hostnames=(host,),
        master_addr="127.0.0.1",
        master_port=master_port_for(str(os.getpid())),
    )


def process_start_time() -> float:
    """When this process started, epoch seconds (Linux /proc, 10 ms resolution; 0 elsewhere)."""
    try:
        stat = Path("/proc/self/stat").read_text()
        ticks = int(stat[stat.rindex(")") + 2 :].split()[19])  # field 22, counted after "(comm)"
        uptime = float(Path("/proc/uptime").read_text().split()[0])  # 10 ms; /proc/stat's btime is whole seconds
        return time.time() - (uptime - ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return 0.0

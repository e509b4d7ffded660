"""Task placement: what each task sees of its rank, node and local id, read in the job
(``checks.placement`` judges it on the login node)."""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass

from pytest_gpucluster.workloads.context import TaskContext


@dataclass(frozen=True)
class Placement:
    """The ids one task reads from its environment."""

    hostname: str
    procid: int
    localid: int
    nodeid: int
    ntasks: int
    source: str  # "slurm" or "local": which variables were read


def _int(*names: str) -> int | None:
    for name in names:
        value = os.environ.get(name)
        if value is not None and value.strip().lstrip("-").isdigit():
            return int(value)
    return None


def report_placement(ctx: TaskContext) -> Placement:
    """Read the ids the scheduler gave this task, straight from the environment, so the check
    tests what Slurm set and not what the launcher believes."""
    source = "slurm" if "SLURM_PROCID" in os.environ else "local"
    procid = _int("SLURM_PROCID", "SUBMITIT_LOCAL_GLOBALID")
    localid = _int("SLURM_LOCALID", "SUBMITIT_LOCAL_LOCALID")
    nodeid = _int("SLURM_NODEID", "SUBMITIT_LOCAL_NODEID")
    ntasks = _int("SLURM_NTASKS", "SUBMITIT_LOCAL_NTASKS")
    return Placement(
        hostname=socket.gethostname(),
        procid=-1 if procid is None else procid,
        localid=-1 if localid is None else localid,
        nodeid=-1 if nodeid is None else nodeid,
        ntasks=-1 if ntasks is None else ntasks,
        source=source,
    )

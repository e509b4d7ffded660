"""The facts of the login side a run's results keep: versions, the login node, the executor, the
threshold set, the GPUs the caller exposed to the local executor, Slurm's version and what the
jobs ask of it (partition, account, QOS, reservation, constraint, whole nodes to measure on)."""

from __future__ import annotations

import contextlib
import importlib.metadata
import platform
import socket
from typing import Any

from pytest_gpucluster import slurm
from pytest_gpucluster.config import Profile
from pytest_gpucluster.errors import GpuClusterError
from pytest_gpucluster.launch.local_gpus import LocalGpus


def version(dist: str) -> str | None:
    """An installed distribution's version, or None."""
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def run_environment(
    profile: Profile, thresholds_set: str, local_gpus: LocalGpus | None, client: slurm.Slurm | None
) -> dict[str, Any]:
    """The results' ``environment`` at the start of a run; Slurm's version asked through the
    run's ``client`` (None: a run that submits nothing does not ask)."""
    facts: dict[str, Any] = {
        "plugin": version("pytest-gpucluster"),
        "python": platform.python_version(),
        "pytest": version("pytest"),
        "submitit": version("submitit"),
        "torch": version("torch"),
        "login_node": socket.gethostname(),
        "executor": profile.executor,
        "thresholds_set": thresholds_set,
    }
    if local_gpus is not None and local_gpus.restricted:
        facts["cuda_visible_devices"] = local_gpus.describe()
    if profile.executor == "slurm":
        if client is not None:
            with contextlib.suppress(GpuClusterError):
                facts["slurm"] = slurm.version(client)
        # What every job asks of Slurm beyond its shape, and whether a measuring job has its nodes
        # to itself (false: the profile lets other jobs share them).
        facts.update({key: getattr(profile, key) for key in SUBMITTED_WITH if getattr(profile, key)})
        facts["measuring_jobs_exclusive"] = profile.exclusive
    return facts


SUBMITTED_WITH = ("partition", "account", "qos", "reservation", "constraint")

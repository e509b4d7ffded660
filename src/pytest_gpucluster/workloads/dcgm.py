"""NVIDIA DCGM diagnostics where DCGM is installed: ``dcgmi diag -r LEVEL -j`` run on a node,
bounded by the level's timeout. ``checks.dcgm`` parses and judges its output on the login node.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from dataclasses import dataclass

from pytest_gpucluster.workloads.context import TaskContext
from pytest_gpucluster.workloads.inventory import node_name
from pytest_gpucluster.workloads.nvml_util import NODE_GPUS_ENV

# How long each run level may take on an 8-GPU node (DCGM's documentation: r1 seconds, r2 about
# 2 min, r3 about 30 min, r4 up to 2 h), with margin.
DIAG_TIMEOUT_S = {1: 300, 2: 900, 3: 3600, 4: 3 * 3600}


@dataclass(frozen=True)
class DiagRun:
    """What ``dcgmi diag`` did on one node (``found`` False: dcgmi is not installed there)."""

    node: str
    found: bool
    level: int
    returncode: int | None = None
    stdout: str = ""
    stderr: str = ""
    seconds: float = 0.0
    timed_out: bool = False


def run_diag(ctx: TaskContext, *, level: int = 1, timeout_s: float | None = None) -> DiagRun | None:
    """Workload: run ``dcgmi diag -r level -j`` once per node, bounded by the level's timeout."""
    if ctx.local_rank != 0:
        return None
    node = node_name(ctx)
    exe = shutil.which("dcgmi")
    if exe is None:
        return DiagRun(node=node, found=False, level=level)
    limit = timeout_s or DIAG_TIMEOUT_S.get(level, DIAG_TIMEOUT_S[4])
    argv = [exe, "diag", "-r", str(level), "-j"]
    node_gpus = os.environ.get(NODE_GPUS_ENV)
    if node_gpus:  # the node is part of the machine: diagnose its GPUs only (NVML indices)
        argv += ["-i", node_gpus]
    started = time.monotonic()
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=limit, check=False)
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode(errors="replace") if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        return DiagRun(node, True, level, None, out, "", time.monotonic() - started, timed_out=True)
    return DiagRun(node, True, level, done.returncode, done.stdout, done.stderr, time.monotonic() - started)

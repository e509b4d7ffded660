"""NVIDIA nvbandwidth where it is installed: the host→device, device→host and device↔device copy
engine testcases on one node, bounded by a timeout. ``checks.nvbandwidth`` parses and judges
what it printed on the login node.

The binary is the profile's ``nvbandwidth_path`` when set, else ``nvbandwidth`` on the node's
PATH. Versions that offer ``--json`` (0.5 and later) are asked for it; older ones print their
text matrices, which the login side reads as well.
"""

from __future__ import annotations

import subprocess
import time
from dataclasses import dataclass

from pytest_gpucluster.workloads.context import TaskContext
from pytest_gpucluster.workloads.inventory import node_name
from pytest_gpucluster.workloads.tools import find_tool

# The copy-engine testcases the check judges: one CPU→GPU and GPU→CPU row per GPU, and every GPU
# reading from every other (the same three that Azure's health checks gate on).
TESTCASES = ("host_to_device_memcpy_ce", "device_to_host_memcpy_ce", "device_to_device_memcpy_read_ce")
HELP_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class NvbandwidthRun:
    """What nvbandwidth did on one node (``found`` False: no binary; ``absent`` says where it
    was looked for)."""

    node: str
    found: bool
    absent: str = ""
    argv: tuple[str, ...] = ()
    json_output: bool = False
    returncode: int | None = None
    stdout: str = ""
    stderr: str = ""
    seconds: float = 0.0
    timed_out: bool = False
    timeout_s: float = 0.0


def _text(value: str | bytes | None) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else (value or "")


def speaks_json(exe: str) -> bool:
    """Whether this nvbandwidth offers ``--json`` (its help lists it)."""
    try:
        done = subprocess.run([exe, "--help"], capture_output=True, text=True, timeout=HELP_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return "--json" in done.stdout + done.stderr


def nvbandwidth_argv(exe: str, *, json_output: bool, testcases: tuple[str, ...] = TESTCASES) -> list[str]:
    """The command line: the testcases by name, JSON output where offered."""
    return [exe, "-t", *testcases, *(["-j"] if json_output else [])]


def run_nvbandwidth(ctx: TaskContext, *, path: str | None = None, timeout_s: float = 600.0) -> NvbandwidthRun | None:
    """Workload, one task per node: run the testcases once, bounded by ``timeout_s``."""
    if ctx.local_rank != 0:
        return None
    node = node_name(ctx)
    exe, absent = find_tool("nvbandwidth", path, "nvbandwidth_path")
    if exe is None:
        return NvbandwidthRun(node=node, found=False, absent=absent)
    json_output = speaks_json(exe)
    argv = tuple(nvbandwidth_argv(exe, json_output=json_output))
    started = time.monotonic()
    try:
        done = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired as exc:
        return NvbandwidthRun(
            node,
            True,
            argv=argv,
            json_output=json_output,
            stdout=_text(exc.stdout),
            stderr=_text(exc.stderr),
            seconds=time.monotonic() - started,
            timed_out=True,
            timeout_s=timeout_s,
        )
    return NvbandwidthRun(
        node,
        True,
        argv=argv,
        json_output=json_output,
        returncode=done.returncode,
        stdout=done.stdout,
        stderr=done.stderr,
        seconds=time.monotonic() - started,
        timeout_s=timeout_s,
    )

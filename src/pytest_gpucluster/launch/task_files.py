"""What a job's tasks leave in its submitit folder, read on the login side: their result files
(``read_tasks`` reads every task's once), the Xid watch a failed task left beside its result, the
record of a task whose Python environment cannot use its GPUs, and the batch step's stderr (srun's
word on nodes it could not start tasks on)."""

from __future__ import annotations

import os
import pickle
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import submitit

from pytest_gpucluster.launch import TaskResult
from pytest_gpucluster.launch.node import environment_path, xid_path
from pytest_gpucluster.workloads.gpu_environment import TorchGpuMismatch
from pytest_gpucluster.workloads.net_settings import SettingMismatch
from pytest_gpucluster.workloads.xid import XidWatch


def tail(path: Path, lines: int = 25) -> str:
    """The last ``lines`` lines of a log; empty when it cannot be read."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    return "\n".join(text.rstrip().splitlines()[-lines:])


# srun's own line when it cannot start a step's tasks on a node (a dead or unreachable slurmd),
# written to the batch step's stderr: "srun: error: Task launch for StepId=29.0 failed on node
# node4: Communication connection failure".
_LAUNCH_FAILED = re.compile(r"Task launch for StepId=(\S+) failed on node (\S+): (.+)")


def launch_failures(stderr_text: str) -> dict[str, str]:
    """Nodes srun could not start tasks on, from the batch step's stderr: node → why."""
    out: dict[str, str] = {}
    for match in _LAUNCH_FAILED.finditer(stderr_text):
        step, node, why = match.groups()
        out.setdefault(node, f"unreachable: srun could not start step {step}'s tasks there ({why.strip()})")
    return out


def written_results(folder: Path, job_id: str, count: int) -> set[int]:
    """The indices (below ``count``) of the tasks whose result file exists, from one listing of
    the job's folder rather than one look-up per task (512 of them at 64 × 8, on a shared
    filesystem, every second while the job runs)."""
    prefix, suffix = f"{job_id}_", "_result.pkl"
    found: set[int] = set()
    try:
        with os.scandir(folder) as entries:
            for entry in entries:
                name = entry.name
                if name.startswith(prefix) and name.endswith(suffix):
                    middle = name[len(prefix) : -len(suffix)]
                    if middle.isdigit() and int(middle) < count:
                        found.add(int(middle))
    except FileNotFoundError:
        pass
    return found


def peek_result(path: Path) -> tuple[str, Any] | None:
    """(outcome, payload) of a task's result file, or None while it is still being written."""
    try:
        outcome, payload = submitit.core.utils.pickle_load(path)
    except Exception:  # still being written; looked at again next round
        return None
    return str(outcome), payload


def read_result(path: Path) -> tuple[str, Any]:
    """(outcome, value or error text) from a task's result file; a file still being written is
    read again after a moment, then reported as unreadable."""
    for attempt in range(3):
        try:
            outcome, payload = submitit.core.utils.pickle_load(path)
            return str(outcome), payload
        except (EOFError, pickle.UnpicklingError, OSError, ValueError) as exc:
            if attempt == 2:
                return "error", f"result file {path} could not be read: {exc}"
            time.sleep(0.5)
    raise AssertionError("unreachable")


def last_error_line(lines: list[str]) -> str:
    """The most telling line of a submitit error: the exception, not the banner."""
    for line in reversed(lines):
        stripped = line.strip()
        if stripped and not set(stripped) <= {"-"} and not stripped.startswith(("You can check", "or at paths", "- /")):
            return stripped
    return lines[0] if lines else "no output"


def left_watch(result_pickle: Path) -> XidWatch | None:
    """The Xid watch a task whose workload raised left beside its result, if any."""
    watch = _left(xid_path(result_pickle))
    return watch if isinstance(watch, XidWatch) else None


def left_environment(result_pickle: Path) -> TorchGpuMismatch | SettingMismatch | None:
    """The record a task left when torch could not use the GPUs NVML sees, or a network setting
    matched nothing on its node, if any."""
    record = _left(environment_path(result_pickle))
    return record if isinstance(record, (TorchGpuMismatch, SettingMismatch)) else None


def _left(path: Path) -> object:
    try:
        return pickle.loads(path.read_bytes())
    except (OSError, pickle.UnpicklingError, EOFError, AttributeError, ValueError):
        return None


@dataclass
class TasksRead:
    """What a job's tasks left, read once after the job ended."""

    results: list[TaskResult[Any]] = field(default_factory=list)  # the tasks that succeeded
    failed: list[tuple[int, str]] = field(default_factory=list)  # (task index, why)
    unusable: list[TorchGpuMismatch] = field(default_factory=list)  # torch could not use the GPUs NVML sees
    mismatched: list[SettingMismatch] = field(default_factory=list)  # a network setting matched nothing
    watches: dict[int, XidWatch | None] = field(default_factory=dict)  # task index → its Xid watch


def read_tasks(job_id: str, result_pickles: Sequence[Path], missing: str = "no result") -> TasksRead:
    """Every task's result file, in task order: a result, or why the task failed (``missing``
    where it wrote none) with what it left beside it. Each file is read directly: submitit's own
    result() also waits for the process to exit (a second or more for a local task tearing down
    torch and CUDA)."""
    read = TasksRead()
    for index, path in enumerate(result_pickles):
        if not path.exists():
            read.failed.append((index, missing))
            continue
        outcome, output = read_result(path)
        if outcome != "success":
            read.failed.append((index, last_error_line(str(output).strip().splitlines())))
            read.watches[index] = left_watch(path)
            record = left_environment(path)
            if isinstance(record, TorchGpuMismatch):
                read.unusable.append(record)
            elif isinstance(record, SettingMismatch):
                read.mismatched.append(record)
            continue
        ctx = output.context
        watch = getattr(output, "xid", None)
        read.watches[index] = watch
        read.results.append(
            TaskResult(
                job_id,
                ctx.hostname,
                ctx.rank,
                ctx.local_rank,
                ctx.node_rank,
                output.value,
                output.started,
                output.ended,
                getattr(output, "process_started", 0.0),
                getattr(output, "startup_cpu_s", 0.0),
                watch,
            )
        )
    return read

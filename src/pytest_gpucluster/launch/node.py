"""What runs in the job: the entry point every task of every job starts in.

``run_on_node`` builds the task's ``TaskContext`` from the scheduler's environment, times the
workload, and returns its value in a ``TaskOutput`` that the launcher reads back on the login
node. submitit pickles ``run_on_node`` and ``TaskOutput`` by reference (module and name), so both
live here at module level; this module imports only submitit's job environment and the workloads'
context and Xid watcher, never the login side (Slurm queries, the session, the backend's waiting
logic).

In a task given GPUs, the entry also watches NVML's Xid events while the workload runs
(``workloads.xid``): the watch travels back in the ``TaskOutput`` or, when the workload raised, in
a file beside the task's result (``xid_path``), so a task that an Xid killed still reports it.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import pickle
import socket
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

import submitit

from pytest_gpucluster.workloads.context import TaskContext, master_port_for, process_start_time
from pytest_gpucluster.workloads.gpu_environment import GIVEN_GPUS_ENV, TorchCannotUseGpus
from pytest_gpucluster.workloads.net_settings import SettingMatchesNothing
from pytest_gpucluster.workloads.xid import XidWatch, XidWatcher, node_of

R = TypeVar("R")


@dataclass(frozen=True)
class TaskOutput(Generic[R]):
    """What one task sends back: its context, the workload's value and when it ran (epoch s)."""

    context: TaskContext
    value: R
    started: float = 0.0
    ended: float = 0.0
    process_started: float = 0.0
    startup_cpu_s: float = 0.0  # CPU the process used before the workload started
    xid: XidWatch | None = None  # the Xid events seen while the workload ran, in a task given GPUs


def xid_path(result_pickle: Path) -> Path:
    """Where a task whose workload raised leaves its Xid watch: beside its result file."""
    return result_pickle.with_name(result_pickle.name.replace("_result.pkl", "") + "_xid.pkl")


def environment_path(result_pickle: Path) -> Path:
    """Where a task whose environment cannot work on its node (torch cannot use the GPUs, a
    network setting matches nothing there) leaves the record saying why."""
    return result_pickle.with_name(result_pickle.name.replace("_result.pkl", "") + "_environment.pkl")


def run_on_node(
    fn: Callable[..., R], env: Mapping[str, str], kwargs: Mapping[str, Any], watch_xid: bool = False
) -> TaskOutput[R]:
    """Runs on the compute node: build the task's context from the scheduler's environment,
    then call the workload; ``watch_xid`` (the job was given GPUs): watch NVML's Xid events while
    it runs. A workload that finds torch cannot use the GPUs, or a network setting that matches
    nothing on the node, leaves the record beside the result."""
    os.environ.update(env)
    os.environ[GIVEN_GPUS_ENV] = "1" if watch_xid else "0"
    job_env = submitit.JobEnvironment()
    hostnames = tuple(job_env.hostnames) or (socket.gethostname(),)
    job_id = str(job_env.job_id)
    ctx = TaskContext(
        job_id=job_id,
        rank=job_env.global_rank,
        local_rank=job_env.local_rank,
        node_rank=job_env.node,
        world_size=job_env.num_tasks,
        num_nodes=job_env.num_nodes,
        hostname=socket.gethostname(),
        hostnames=hostnames,
        master_addr=hostnames[0],
        master_port=master_port_for(job_id),
    )
    cpu = os.times()
    startup_cpu = cpu.user + cpu.system
    watcher = XidWatcher(node_of(ctx), job_id, ctx.rank).start() if watch_xid else None
    started = time.time()
    try:
        value = fn(ctx, **kwargs)
    except BaseException as exc:
        if watcher is not None:
            _leave(xid_path, job_env, watcher.stop())
        if isinstance(exc, (TorchCannotUseGpus, SettingMatchesNothing)):
            _leave(environment_path, job_env, exc.record)
        exit_once_written(1)
        raise
    ended = time.time()
    watch = watcher.stop() if watcher is not None else None
    exit_once_written(0)
    return TaskOutput(ctx, value, started, ended, process_start_time(), startup_cpu, watch)


def _leave(where: Callable[[Path], Path], job_env: submitit.JobEnvironment, what: object) -> None:
    """Write what a task whose workload raised leaves beside its result (its Xid watch, the
    record of an environment that cannot use its GPUs); never masks the error."""
    with contextlib.suppress(Exception):
        path = where(Path(job_env.paths.result_pickle))
        tmp = path.with_suffix(".tmp")
        tmp.write_bytes(pickle.dumps(what))
        tmp.replace(path)


def exit_once_written(code: int) -> None:
    """In a job's own process, end it as soon as submitit has written the task's result, with
    ``code``: without this, Python's shutdown tears down torch, CUDA contexts and communicators
    one object at a time (docs/gpu-runs.md has the cost, ``benchmarks/process_exit.py`` measures
    it), and the next job cannot start on the node until this one has ended. An exit hook registered now runs
    before the ones the workload's imports registered (they run last-in, first-out), so none of
    theirs run. Should writing the result fail after all, submitit raises and Python has set
    ``sys.last_value`` before exit hooks run: the process then ends with 1. Anywhere else (a test
    calling this function directly) it does nothing."""
    main = sys.modules.get("__main__")
    if getattr(getattr(main, "__spec__", None), "name", "") != "submitit.core._submit":
        return

    def now() -> None:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        uncaught = getattr(sys, "last_exc", None) or getattr(sys, "last_value", None)
        os._exit(1 if uncaught is not None else code)

    atexit.register(now)

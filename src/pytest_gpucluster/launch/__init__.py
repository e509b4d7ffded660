"""Launching workloads on nodes: the job shape, the task result and the protocol a backend fills in.

``submitit_backend`` implements ``Launcher`` over submitit and ``job`` implements ``Job``, each as
a base class whose backends fill in what differs, as submitit's executors do: ``slurm_backend``
(``SlurmLauncher``, ``SlurmJob``) and ``local_backend`` (``LocalLauncher``, ``LocalJob``, the
embedded local executor), so the same client code runs on a cluster and on a laptop. A
launcher's jobs read Slurm through its one ``watcher`` and end their waits by the pure rules of
``wait_rules``; ``task_files`` reads what the tasks left in the job's folder, and
``together`` waits on jobs that must run at once. ``node`` is what runs inside the job (the
task's entry point); it imports nothing of the login side.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, Protocol, TypeVar

from pytest_gpucluster.workloads.xid import XidWatch

R = TypeVar("R")


@dataclass(frozen=True)
class JobSpec:
    """The shape of one job: N nodes × T tasks, G GPUs per node, and its time limit."""

    name: str
    nodes: int = 1
    tasks_per_node: int = 1
    gpus_per_node: int = 0
    gpus_per_task: int | None = None
    nodelist: tuple[str, ...] = ()
    timeout_min: int = 10
    exclusive: bool = False
    cpus_per_task: int | None = None
    env: Mapping[str, str] | None = None
    # The nodelist is "every tested node": a node the run loses before the job is submitted is
    # left out of it (its checks fail on their own with the first evidence), not a reason to
    # refuse the job for the others.
    all_nodes: bool = False


@dataclass(frozen=True)
class TaskResult(Generic[R]):
    """One task's return value and where it ran."""

    job_id: str
    node: str
    rank: int
    local_rank: int
    node_rank: int
    value: R
    # When the workload function ran on its node (epoch seconds; 0 when unknown): the time the
    # workload itself took, as against the launcher's (submission, queue, start-up, collection).
    started: float = 0.0
    ended: float = 0.0
    # When the task's process started (epoch seconds; 0 when unknown): what lies between this
    # and ``started`` is the process's start-up (interpreter, imports, unpickling the workload).
    process_started: float = 0.0
    # CPU seconds the task's process used before the workload started (interpreter, imports,
    # unpickling): a start-up far longer than this waited, on files or on CPUs.
    startup_cpu_s: float = 0.0
    # The Xid events NVML delivered while the workload ran, in a task given GPUs (None elsewhere).
    xid: XidWatch | None = None


def start_up_summary(results: Sequence[TaskResult[Any]]) -> dict[str, float]:
    """How long a job's tasks took from their process's start to the workload's start: the
    median and the slowest task (wall seconds) and the median CPU that took; empty when the
    tasks did not say. Start-up far above its CPU means the tasks waited: on a Python
    environment read from a shared filesystem by every task at once, or on CPUs held by others."""
    timed = [r for r in results if r.process_started and r.started >= r.process_started]
    if not timed:
        return {}
    walls = sorted(r.started - r.process_started for r in timed)
    cpus = sorted(r.startup_cpu_s for r in timed)
    return {
        "tasks": len(timed),
        "wall_median_s": round(walls[len(walls) // 2], 3),
        "wall_max_s": round(walls[-1], 3),
        "cpu_median_s": round(cpus[len(cpus) // 2], 3),
    }


# A status callback receives (job id, state, reason or "") whenever a job's state changes.
StatusCallback = Callable[[str, str, str], None]


class Job(Protocol[R]):
    """A submitted job: what the session and the tests may ask of one, whatever the backend."""

    # Set by the session: called with (first task's start, last task's end), epoch seconds,
    # once the results are in.
    on_ran: Callable[[float, float], None] | None
    submitted_epoch: float  # when it was submitted (epoch seconds)
    process_started: float  # when its first task's process started (epoch seconds), once results are in; 0 before
    start_up: dict[str, float]  # its tasks' start-up (``start_up_summary``), once results are in; empty before

    @property
    def job_id(self) -> str:
        """The scheduler's id."""

    @property
    def folder(self) -> Path:
        """Where the job's files and logs are kept."""

    @property
    def nodelist(self) -> tuple[str, ...]:
        """The nodes the job is pinned to (empty: wherever Slurm puts it)."""

    def results(self, *, lag_s: float | None = None, learn_lost: bool = True) -> list[TaskResult[R]]:
        """Wait (bounded) and return one result per task, ordered by rank; ``lag_s`` bounds the
        wait for results still missing once the job ended; ``learn_lost`` false: a node whose
        tasks all stayed silent is not taken as lost (a job that kills a task on purpose)."""

    def never_started(self) -> str | None:
        """Why the job ended without ever running (the scheduler's words), or None when it ran."""

    def cancel(self) -> None:
        """Cancel the job; a no-op once it ended."""


class Launcher(Protocol):
    """Runs workloads on the cluster. ``slurm_backend.SlurmLauncher`` and, for this machine
    through submitit's local executor, ``local_backend.LocalLauncher`` implement it; the session
    holds a ``Launcher``."""

    # Every Xid watch of the run's tasks whose results were read, failed tasks' included: (job id, task) → watch.
    xid_watches: dict[tuple[str, int], XidWatch]

    def submit(self, fn: Callable[..., R], spec: JobSpec, /, **kwargs: Any) -> Job[R]:
        """Start ``fn(ctx, **kwargs)`` on every task of ``spec`` without waiting."""

    def settle(self) -> list[str]:
        """At a run's normal end: wait (bounded) for finished jobs to leave the queue; returns
        the ids still listed."""

    def cancel_all(self) -> list[str]:
        """Cancel every job still pending or running; returns their ids."""

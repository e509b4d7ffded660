"""Launching workloads on nodes: the protocol every backend fills in.

``submitit_backend`` is the one module that imports submitit; it serves both Slurm and the
embedded local executor, so the same client code runs on a cluster and on a laptop.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

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


# A status callback receives (job id, state, reason or "") whenever a job's state changes.
StatusCallback = Callable[[str, str, str], None]


class Job(Protocol):
    """A submitted job."""

    @property
    def job_id(self) -> str:
        """The scheduler's id."""

    def results(self, *, lag_s: float | None = None) -> list[TaskResult[Any]]:
        """Wait (bounded) and return one result per task, ordered by rank; ``lag_s`` bounds the
        wait for results still missing once the job ended."""

    def cancel(self) -> None:
        """Cancel the job; a no-op once it ended."""


class Launcher(Protocol):
    """Runs workloads on the cluster."""

    def submit(self, fn: Callable[..., Any], spec: JobSpec, /, **kwargs: Any) -> Job:
        """Start ``fn(ctx, **kwargs)`` on every task of ``spec`` without waiting."""

    def cancel_all(self) -> list[str]:
        """Cancel every job still pending or running; returns their ids."""

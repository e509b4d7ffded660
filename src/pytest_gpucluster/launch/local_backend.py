"""The local backend: ``LocalLauncher`` runs a job's tasks as processes on this machine through
submitit's local executor, and ``LocalJob`` follows them by their processes. Nothing here asks
Slurm: there is no queue to wait in, no node to lose and no accounting to read.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

import submitit

from pytest_gpucluster.errors import LaunchError
from pytest_gpucluster.launch import JobSpec, StatusCallback
from pytest_gpucluster.launch.job import SubmititJob
from pytest_gpucluster.launch.lost import LostNodes
from pytest_gpucluster.launch.node import TaskOutput
from pytest_gpucluster.launch.submitit_backend import SubmititLauncher
from pytest_gpucluster.launch.watcher import JobWatcher

R = TypeVar("R")

# How long a job's processes may take to end after the last result was written.
LOCAL_EXIT_LIMIT_S = 10.0


class LocalJob(SubmititJob[R]):
    """A job of submitit's local executor: its tasks are processes of this machine, running until
    each has written its result or the job's time limit is past."""

    def _state(self, force: bool) -> str:
        return str(self._job.state).upper()

    def _nodes(self) -> tuple[str, ...]:
        return (socket.gethostname(),)

    def _has_ended(self, state: str) -> bool:
        return state != "RUNNING"

    def _stop(self) -> None:
        with self._watcher.submitit_lock:
            self._job.cancel(check=False)

    def _wait(self) -> str:
        # Every state but RUNNING is an end (``_has_ended``): the job is never in a queue.
        started: float | None = None
        last_state = ""
        while True:
            now = time.monotonic()
            state = self._state(force=False)
            self._seen(state, last_state)
            last_state = state
            if self._finished(state):
                return self._ended(state)
            started = started or now
            self._within_limit(state, now - started)
            if self._cancelled_for_failed_task(now):
                return "CANCELLED"
            time.sleep(self._launcher.poll_s)

    def _after_results(self) -> None:
        """Results are read as soon as they are written. Wait (bounded) for the job's processes
        to end as well, so the next job does not share the GPUs with their exit and no process is
        left behind unreaped (Python warns about those)."""
        deadline = time.monotonic() + LOCAL_EXIT_LIMIT_S
        while self._state(force=True) == "RUNNING" and time.monotonic() < deadline:
            time.sleep(0.05)


class LocalLauncher(SubmititLauncher):
    """Runs a job's tasks on this machine through submitit's local executor; its jobs are
    ``LocalJob``. One node per job: this machine."""

    cluster = "local"

    def __init__(
        self,
        *,
        folder: Path,
        env: Mapping[str, str] | None = None,
        queue_timeout_s: float = 300.0,
        poll_s: float = 0.25,
        on_status: StatusCallback | None = None,
        visible_gpus: tuple[int, ...] | None = None,
        lost: LostNodes | None = None,
    ) -> None:
        # The watcher keeps the jobs being waited on and the run's record of lost nodes.
        watcher = JobWatcher(lost=lost)
        super().__init__(
            folder=folder, watcher=watcher, env=env, queue_timeout_s=queue_timeout_s, poll_s=poll_s, on_status=on_status
        )
        # The machine's GPUs a job's tasks may get (NVML indices), as the caller's
        # CUDA_VISIBLE_DEVICES exposed them; None: all, numbered from 0.
        self.visible_gpus = visible_gpus

    def _check(self, spec: JobSpec) -> None:
        if spec.nodes != 1:
            raise LaunchError(f"{spec.name}: the local executor runs on one node; {spec.nodes} were asked for.")

    def _parameters(self, spec: JobSpec) -> dict[str, Any]:
        return {"gpus_per_node": spec.gpus_per_node}

    def _prepare(self, executor: submitit.AutoExecutor) -> None:
        if self.visible_gpus is not None:
            # The tasks' CUDA_VISIBLE_DEVICES are taken from these, not 0..gpus_per_node-1.
            # submitit's LocalExecutor takes visible_gpus; its AutoExecutor passes no such
            # parameter on.
            executor._executor.update_parameters(visible_gpus=self.visible_gpus)

    def _job_of(self, job: submitit.Job[TaskOutput[R]], spec: JobSpec) -> LocalJob[R]:
        return LocalJob(job, spec, self)

"""The launcher over submitit, as submitit has its executors: ``SubmititLauncher`` holds what every
backend shares and each backend fills in a handful of methods, ``slurm_backend.SlurmLauncher``
(``AutoExecutor(cluster="slurm")``) and ``local_backend.LocalLauncher`` (submitit's local
executor). With the jobs, ``watcher``, ``task_files`` and ``node`` (what runs in the job), the
only modules that import submitit.

The launcher submits and cancels; each job (``launch.job``) is a future whose bounded wait reads
its backend through the launcher's one watcher (``launch.watcher``), shared by all its
jobs, and ends by the rules of ``launch.wait_rules``.
"""

from __future__ import annotations

import dataclasses
import shutil
import uuid
from abc import abstractmethod
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, ClassVar, TypeVar

import submitit

from pytest_gpucluster.errors import DaemonUnreachable, LaunchError, NodeLostError, SharedFsFault
from pytest_gpucluster.launch import JobSpec, Launcher, StatusCallback, TaskResult
from pytest_gpucluster.launch import wait_rules as rules
from pytest_gpucluster.launch.job import SubmititJob
from pytest_gpucluster.launch.node import TaskOutput, run_on_node
from pytest_gpucluster.launch.watcher import SETTLE_S, JobWatcher, submitit_logs_to_stderr
from pytest_gpucluster.workloads.xid import XidWatch

__all__ = ["SubmititJob", "SubmititLauncher", "submitit_logs_to_stderr"]

R = TypeVar("R")


class SubmititLauncher(Launcher):
    """Submits workloads through submitit and cancels them (the submitit implementation of
    ``launch.Launcher``). Its jobs are followed by its ``watcher``; what they ask of the
    launcher itself is public: its settings, ``status`` and ``keep_watch``. A backend's subclass
    names submitit's cluster and fills in the methods between ``_check`` and ``_job_of``."""

    cluster: ClassVar[str]  # submitit's name of the backend (``AutoExecutor(cluster=...)``)

    def __init__(
        self,
        *,
        folder: Path,
        watcher: JobWatcher,
        env: Mapping[str, str] | None = None,
        queue_timeout_s: float = 300.0,
        poll_s: float = 0.25,
        on_status: StatusCallback | None = None,
    ) -> None:
        self.folder = folder
        self.env = dict(env or {})
        self.queue_timeout_s = queue_timeout_s
        self.poll_s = poll_s
        self.on_status = on_status
        self.failed_task_grace_s = rules.FAILED_TASK_GRACE_S
        # What the backend says of this launcher's jobs and their nodes, read once for all of them,
        # with the run's record of the nodes it lost and its client of Slurm.
        self.watcher = watcher
        self.xid_watches: dict[tuple[str, int], XidWatch] = {}

    # ------------------------------------------------------------------ what each backend fills in

    def _check(self, spec: JobSpec) -> None:
        """Refuse a shape the backend cannot run (LaunchError), before anything is written."""

    @abstractmethod
    def _parameters(self, spec: JobSpec) -> dict[str, Any]:
        """submitit's parameters for ``spec`` besides its name, nodes, tasks and time limit."""

    def _prepare(self, executor: submitit.AutoExecutor) -> None:
        """Anything the backend sets on submitit's executor that its parameters cannot say."""

    def _send(self, send: Callable[[], submitit.Job[Any]]) -> submitit.Job[Any]:
        """Submit through ``send``, as often as the backend allows."""
        return send()

    def _refusal_hint(self, spec: JobSpec, refusal: Exception) -> str:
        """What the refusal of ``spec`` is added to say about why ("": nothing)."""
        return ""

    @abstractmethod
    def _job_of(self, job: submitit.Job[TaskOutput[R]], spec: JobSpec) -> SubmititJob[R]:
        """The backend's future of a submitted job."""

    # ------------------------------------------------------------------ what every backend shares

    def keep_watch(self, job_id: str, task: int, watch: XidWatch | None) -> None:
        """Keep a task's Xid watch for the run's Xid check (once per task, however often read)."""
        if watch is not None:
            self.xid_watches[(job_id, task)] = watch

    def status(self, job_id: str, state: str, reason: str) -> None:
        """Tell the caller's status callback that a job's state changed."""
        if self.on_status is not None:
            self.on_status(job_id, state, reason)

    def _unless_lost(self, spec: JobSpec) -> JobSpec:
        """``spec``, refused without a submission when it is pinned to a node this run lost
        (naming the first evidence), unless it asks for every tested node (``spec.all_nodes``):
        then it runs on the others."""
        lost, seen_as = self.watcher.lost.nodes, self.watcher.lost.seen
        gone = [n for n in spec.nodelist if n in lost]
        if gone and spec.all_nodes and len(gone) < len(spec.nodelist):
            kept = tuple(n for n in spec.nodelist if n not in lost)
            return dataclasses.replace(spec, nodelist=kept, nodes=len(kept))
        if gone:
            seen = "; ".join(f"{n}: {lost[n]} (seen {seen_as.get(n, {}).get('how', 'earlier')})" for n in gone)
            raise NodeLostError(
                f"{spec.name}: not submitted: {seen}", lost={n: lost[n] for n in gone}, nodes=tuple(gone)
            )
        return spec

    def submit(self, fn: Callable[..., R], spec: JobSpec, /, **kwargs: Any) -> SubmititJob[R]:
        """Start ``fn(ctx, **kwargs)`` on every task of ``spec``; returns at once. A job pinned to
        a node this run lost is refused without a submission, naming the first evidence, unless
        it asks for every tested node (``spec.all_nodes``): then it runs on the others."""
        spec = self._unless_lost(spec)
        self._check(spec)
        folder = self.folder / f"{spec.name}-{uuid.uuid4().hex[:8]}"
        params: dict[str, Any] = {
            "name": f"gpucluster-{spec.name}",
            "nodes": spec.nodes,
            "tasks_per_node": spec.tasks_per_node,
            "timeout_min": spec.timeout_min,
            **self._parameters(spec),
        }
        env = {**self.env, **(spec.env or {})}
        watch_xid = bool(spec.gpus_per_node or spec.gpus_per_task)

        def send() -> submitit.Job[TaskOutput[R]]:
            executor = submitit.AutoExecutor(folder=folder, cluster=self.cluster)
            executor.update_parameters(**params)
            self._prepare(executor)
            try:
                with self.watcher.submitit_lock:
                    return executor.submit(run_on_node, fn, env, kwargs, watch_xid)
            except Exception:
                shutil.rmtree(folder, ignore_errors=True)  # a try sent again starts afresh
                raise

        try:
            job = self._send(send)
        except OSError as exc:  # the job folder: read-only, full or gone
            raise SharedFsFault(
                f"the shared filesystem cannot take the job's files: {folder}: {exc.strerror or exc}; every node "
                f"reads them from there, so it must be mounted, writable and not full ({spec.name}: not submitted)."
            ) from exc
        except DaemonUnreachable:
            raise
        except Exception as exc:  # sbatch refused: bad partition, account, GRES...
            shutil.rmtree(folder, ignore_errors=True)
            why = f"{spec.name}: submission refused: {exc}".rstrip()
            raise LaunchError(why + self._refusal_hint(spec, exc)) from exc
        handle = self._job_of(job, spec)
        self.watcher.watch(handle, spec.nodelist)
        self.status(handle.job_id, "SUBMITTED", spec.name)
        return handle

    def run(self, fn: Callable[..., R], spec: JobSpec, /, **kwargs: Any) -> list[TaskResult[R]]:
        """Submit and wait: one result per task."""
        return self.submit(fn, spec, **kwargs).results()

    def cancel_all(self) -> list[str]:
        """Cancel every job still pending or running."""
        live = self.watcher.watched()
        for job in live:
            job.cancel()
        return [job.job_id for job in live]

    def settle(self, limit_s: float = SETTLE_S) -> list[str]:
        """At a run's normal end: wait (bounded) for the jobs whose results were all read to leave
        the queue by themselves, so Slurm records them COMPLETED rather than cancelled and their
        nodes are free for whatever runs next; returns the ids still listed at the limit (the
        caller cancels those)."""
        return self.watcher.settle(limit_s)

    def live_job_ids(self) -> list[str]:
        """Ids of jobs submitted and not yet seen to end."""
        return [job.job_id for job in self.watcher.watched()]

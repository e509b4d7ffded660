"""The launcher over submitit: Slurm through ``AutoExecutor(cluster="slurm")``, this machine
through submitit's local executor. The only module that imports submitit.

Every wait here is bounded: a job may stay PENDING for ``queue_timeout_s`` and RUN for its time
limit plus a grace period; past either it is cancelled and a LaunchError names the job, its state,
its nodes, its logs and the end of its stderr.
"""

from __future__ import annotations

import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, Literal, TypeVar

import submitit

from pytest_gpucluster import slurm
from pytest_gpucluster.errors import LaunchError, QueueTimeoutError, WallTimeoutError
from pytest_gpucluster.launch import JobSpec, StatusCallback, TaskResult
from pytest_gpucluster.workloads.context import TaskContext, master_port_for

R = TypeVar("R")

# States in which a job has not started to run yet.
_WAITING = {"PENDING", "REQUEUED", "UNKNOWN", "CONFIGURING", "READY"}
# Past the job's own time limit, Slurm needs a moment to kill it and submitit to notice.
_GRACE_S = 90.0
_SACCT_EVERY_S = 3.0


@dataclass(frozen=True)
class _TaskOutput(Generic[R]):
    context: TaskContext
    value: R


def _run_on_node(fn: Callable[..., R], env: Mapping[str, str], kwargs: Mapping[str, Any]) -> _TaskOutput[R]:
    """Runs on the compute node: build the task's context from the scheduler's environment,
    then call the workload."""
    os.environ.update(env)
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
    return _TaskOutput(ctx, fn(ctx, **kwargs))


def _tail(path: Path, lines: int = 25) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    return "\n".join(text.rstrip().splitlines()[-lines:])


class SubmititJob(Generic[R]):
    """A submitted job with a bounded wait."""

    def __init__(
        self,
        job: submitit.Job[_TaskOutput[R]],
        spec: JobSpec,
        launcher: SubmititLauncher,
    ) -> None:
        self._job = job
        self.spec = spec
        self._launcher = launcher
        self._done = False
        self._queue_state = ""
        self.submitted_at = time.monotonic()

    @property
    def job_id(self) -> str:
        """The scheduler's job id (the process id for the local executor)."""
        return str(self._job.job_id)

    @property
    def folder(self) -> Path:
        """Where submitit keeps this job's pickles and logs."""
        return Path(self._job.paths.folder)

    def _tasks(self) -> list[submitit.Job[_TaskOutput[R]]]:
        n = self.spec.nodes * self.spec.tasks_per_node
        return [self._job.task(i) for i in range(n)] if n > 1 else [self._job]

    def _state(self, force: bool) -> str:
        if self._launcher.executor == "local":
            return str(self._job.state).upper()
        mode = "force" if force else "cache"
        state = str(self._job.watcher.get_state(self.job_id, mode=mode)).upper()
        if state == "UNKNOWN" and force:
            # No accounting (sacct fails) or not recorded yet: ask the queue instead. A job the
            # queue no longer knows has ended, so the wait cannot outlive it.
            try:
                queued = slurm.queue_state(self.job_id)
            except Exception:
                return state
            self._queue_state = queued or "GONE"
        if state == "UNKNOWN" and self._queue_state:
            return self._queue_state
        return state

    def _finished(self, state: str) -> bool:
        if all(t.paths.result_pickle.exists() for t in self._tasks()):
            return True
        if self._launcher.executor == "local":
            return state != "RUNNING"
        if state == "GONE":
            return True
        return bool(self._job.watcher.is_done(self.job_id, mode="cache"))

    def cancel(self) -> None:
        """Cancel the job unless it already ended."""
        if not self._done:
            try:
                self._job.cancel(check=False)
            except OSError:
                pass  # scancel missing or the job is gone; nothing left to stop
            self._done = True
        self._launcher._forget(self)

    def _error(self, cls: type[LaunchError], message: str, state: str) -> LaunchError:
        nodes = self._launcher._job_nodes(self.job_id)
        logs = tuple(str(p) for t in self._tasks()[:2] for p in (t.paths.stdout, t.paths.stderr))
        tail = ""
        for t in self._tasks():
            tail = _tail(Path(t.paths.stderr))
            if tail:
                break
        where = f" on {', '.join(nodes)}" if nodes else ""
        return cls(f"job {self.job_id} ({self.spec.name}){where}: {message}", job_id=self.job_id,
                   state=state, nodes=nodes, log_paths=logs, stderr_tail=tail)  # fmt: skip

    def wait(self) -> str:
        """Block until the job ends, within the queue and wall-time bounds; returns its state."""
        queue_limit = self._launcher.queue_timeout_s
        run_limit = self.spec.timeout_min * 60 + _GRACE_S
        started: float | None = None
        last_state = ""
        last_sacct = 0.0
        while True:
            now = time.monotonic()
            force = now - last_sacct >= _SACCT_EVERY_S
            if force:
                last_sacct = now
            state = self._state(force)
            if state != last_state:
                reason = ""
                if state == "PENDING" and self._launcher.executor == "slurm":
                    reason = self._launcher._pending_reason(self.job_id)
                self._launcher._status(self.job_id, state, reason)
                last_state = state
            if self._finished(state):
                self._done = True
                self._launcher._forget(self)
                return state
            if state in _WAITING and started is None:
                if now - self.submitted_at > queue_limit:
                    reason = self._launcher._pending_reason(self.job_id) or "reason unknown"
                    self.cancel()
                    raise self._error(
                        QueueTimeoutError,
                        f"still {state} after {queue_limit:.0f} s: {reason}; cancelled. "
                        "Check the partition's nodes (sinfo) or raise queue_timeout_s.",
                        state,
                    )
            else:
                started = started or now
                if now - started > run_limit:
                    self.cancel()
                    raise self._error(
                        WallTimeoutError,
                        f"still {state} {now - started:.0f} s after it started, past its "
                        f"{self.spec.timeout_min} min limit; cancelled (a hung or suspended job).",
                        state,
                    )
            time.sleep(self._launcher.poll_s)

    def results(self) -> list[TaskResult[R]]:
        """One result per task, ordered by rank; a failed task raises LaunchError naming it."""
        state = self.wait()
        out: list[TaskResult[R]] = []
        failures: list[str] = []
        nodes = self._launcher._job_nodes(self.job_id)
        for index, task in enumerate(self._tasks()):
            try:
                output = task.result()
            except submitit.core.utils.UncompletedJobError as exc:
                node = nodes[index // self.spec.tasks_per_node] if len(nodes) == self.spec.nodes else "?"
                first = str(exc).strip().splitlines()
                failures.append(f"task {index} on {node}: {_last_error_line(first)}")
                continue
            ctx = output.context
            out.append(TaskResult(self.job_id, ctx.hostname, ctx.rank, ctx.local_rank,
                                  ctx.node_rank, output.value))  # fmt: skip
        if failures:
            final = self._state(force=True) if self._launcher.executor == "slurm" else state
            raise self._error(
                LaunchError, f"ended {final} with {len(failures)} failed task(s): " + "; ".join(failures), final
            )
        return sorted(out, key=lambda r: r.rank)


def _last_error_line(lines: list[str]) -> str:
    """The most telling line of a submitit error: the exception, not the banner."""
    for line in reversed(lines):
        stripped = line.strip()
        if stripped and not set(stripped) <= {"-"} and not stripped.startswith(("You can check", "or at paths", "- /")):
            return stripped
    return lines[0] if lines else "no output"


class SubmititLauncher:
    """Submits workloads through submitit; tracks live jobs so they can all be cancelled."""

    def __init__(
        self,
        *,
        executor: Literal["slurm", "local"],
        folder: Path,
        partition: str | None = None,
        account: str | None = None,
        sbatch_extra: Mapping[str, str] | None = None,
        env: Mapping[str, str] | None = None,
        queue_timeout_s: float = 300.0,
        mem_gb: int | None = None,
        poll_s: float = 0.5,
        on_status: StatusCallback | None = None,
    ) -> None:
        self.executor = executor
        self.folder = folder
        self.partition = partition
        self.account = account
        self.sbatch_extra = dict(sbatch_extra or {})
        self.env = dict(env or {})
        self.queue_timeout_s = queue_timeout_s
        self.mem_gb = mem_gb
        self.poll_s = poll_s
        self.on_status = on_status
        self._live: dict[str, SubmititJob[Any]] = {}
        self._lock = threading.Lock()
        self._nodes_cache: dict[str, tuple[str, ...]] = {}

    def submit(self, fn: Callable[..., R], spec: JobSpec, /, **kwargs: Any) -> SubmititJob[R]:
        """Start ``fn(ctx, **kwargs)`` on every task of ``spec``; returns at once."""
        if self.executor == "local" and spec.nodes != 1:
            raise LaunchError(f"{spec.name}: the local executor runs on one node; {spec.nodes} were asked for.")
        folder = self.folder / f"{spec.name}-{uuid.uuid4().hex[:8]}"
        executor = submitit.AutoExecutor(folder=folder, cluster=self.executor)
        params: dict[str, Any] = {
            "name": f"gpucluster-{spec.name}",
            "nodes": spec.nodes,
            "tasks_per_node": spec.tasks_per_node,
            "timeout_min": spec.timeout_min,
        }
        if self.executor == "local":
            params["gpus_per_node"] = spec.gpus_per_node
        else:
            if spec.gpus_per_task:
                params["slurm_gpus_per_task"] = spec.gpus_per_task
            elif spec.gpus_per_node:
                params["gpus_per_node"] = spec.gpus_per_node
            if spec.cpus_per_task:
                params["cpus_per_task"] = spec.cpus_per_task
            if self.mem_gb:
                params["mem_gb"] = self.mem_gb
            if self.partition:
                params["slurm_partition"] = self.partition
            if self.account:
                params["slurm_account"] = self.account
            if spec.nodelist:
                params["slurm_nodelist"] = ",".join(spec.nodelist)
            if spec.exclusive:
                params["slurm_exclusive"] = True
            if self.sbatch_extra:
                params["slurm_additional_parameters"] = dict(self.sbatch_extra)
            # Tasks of one job must start together for collectives; a shorter signal delay keeps
            # submitit's pre-timeout signal inside short test jobs.
            params["slurm_signal_delay_s"] = min(90, max(10, spec.timeout_min * 60 // 4))
        executor.update_parameters(**params)
        env = {**self.env, **(spec.env or {})}
        try:
            job = executor.submit(_run_on_node, fn, env, kwargs)
        except Exception as exc:  # sbatch refused: bad partition, account, GRES...
            raise LaunchError(f"{spec.name}: submission refused: {exc}".rstrip()) from exc
        handle = SubmititJob(job, spec, self)
        with self._lock:
            self._live[handle.job_id] = handle
        self._status(handle.job_id, "SUBMITTED", spec.name)
        return handle

    def run(self, fn: Callable[..., R], spec: JobSpec, /, **kwargs: Any) -> list[TaskResult[R]]:
        """Submit and wait: one result per task."""
        return self.submit(fn, spec, **kwargs).results()

    def cancel_all(self) -> list[str]:
        """Cancel every job still pending or running."""
        with self._lock:
            live = list(self._live.values())
        for job in live:
            job.cancel()
        return [job.job_id for job in live]

    def live_job_ids(self) -> list[str]:
        """Ids of jobs submitted and not yet seen to end."""
        with self._lock:
            return list(self._live)

    def _forget(self, job: SubmititJob[Any]) -> None:
        with self._lock:
            self._live.pop(job.job_id, None)

    def _status(self, job_id: str, state: str, reason: str) -> None:
        if self.on_status is not None:
            self.on_status(job_id, state, reason)

    def _pending_reason(self, job_id: str) -> str:
        try:
            return slurm.pending_reason(job_id)
        except Exception:  # a reason is a nicety; never let it mask the real error
            return ""

    def _job_nodes(self, job_id: str) -> tuple[str, ...]:
        if self.executor == "local":
            return (socket.gethostname(),)
        if job_id not in self._nodes_cache:
            try:
                nodes = slurm.job_nodes(job_id)
            except Exception:
                return ()
            if nodes:
                self._nodes_cache[job_id] = nodes
            return nodes
        return self._nodes_cache[job_id]

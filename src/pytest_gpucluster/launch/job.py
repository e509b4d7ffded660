"""A submitted job as a future (the submitit implementation of ``launch.Job``): what is common to
Slurm's jobs (``slurm_backend.SlurmJob``) and the local executor's (``local_backend.LocalJob``).
Each backend's job fills in how its state is read, where it ran, when it ended, how it is
cancelled and how it is waited on; this class reads the results from the task files
(``task_files``) and builds the errors of a job that failed.

Every wait is bounded: a job may stay PENDING for ``queue_timeout_s`` and RUN for its time limit
plus a grace period; past either it is cancelled and a LaunchError names the job, its state, its
nodes, its logs and the end of its stderr. A job that ended without results is reported at once
instead of after submitit's own per-task grace period.
"""

from __future__ import annotations

import time
from abc import abstractmethod
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol, TypeVar

import submitit

from pytest_gpucluster.errors import (
    ClusterFault,
    ConfigFault,
    EnvironmentFault,
    GpuClusterError,
    LaunchError,
    NodeLostError,
)
from pytest_gpucluster.launch import Job, JobSpec, TaskResult, start_up_summary
from pytest_gpucluster.launch import task_files as files
from pytest_gpucluster.launch import wait_rules as rules
from pytest_gpucluster.launch.node import TaskOutput
from pytest_gpucluster.launch.watcher import JobWatcher
from pytest_gpucluster.verdict.ranges import hostlist
from pytest_gpucluster.workloads.gpu_environment import TorchGpuMismatch
from pytest_gpucluster.workloads.net_settings import SettingMismatch
from pytest_gpucluster.workloads.xid import XidWatch

R = TypeVar("R")


class Owner(Protocol):
    """What a job reads of the launcher that submitted it (``SubmititLauncher``)."""

    @property
    def watcher(self) -> JobWatcher: ...

    @property
    def queue_timeout_s(self) -> float: ...

    @property
    def poll_s(self) -> float: ...

    @property
    def failed_task_grace_s(self) -> float: ...

    @property
    def env(self) -> dict[str, str]: ...  # what every job's tasks get in their environment (the profile's env)

    def status(self, job_id: str, state: str, reason: str) -> None: ...

    def keep_watch(self, job_id: str, task: int, watch: XidWatch | None) -> None: ...


class SubmititJob(Job[R]):
    """A submitted job with a bounded wait; a backend's subclass says how its state is read,
    where it ran, when it ended, how it is cancelled and waited on."""

    def __init__(self, job: submitit.Job[TaskOutput[R]], spec: JobSpec, launcher: Owner) -> None:
        self._job = job
        self.spec = spec
        self._launcher = launcher
        self._watcher = launcher.watcher
        self._done = False
        self.submitted_at = time.monotonic()
        self.submitted_epoch = time.time()
        self._failed_tasks: dict[int, str] = {}  # task index → its error's last line, seen while running
        self._checked_pickles: set[int] = set()
        self._first_failure: float | None = None
        self._final_state: str | None = None  # once wait() has seen the job end
        self._some_results = False  # some, not all, tasks have written their result
        self._written = 0  # tasks 0 .. _written-1 are known to have written their result
        self._last_failed_scan = 0.0
        # Called with (first task's start, last task's end), epoch seconds, once results are in.
        self.on_ran: Callable[[float, float], None] | None = None
        # Epoch seconds the first task's process started, once results are in (0: not known).
        self.process_started = 0.0
        self.start_up: dict[str, float] = {}  # its tasks' start-up (start_up_summary), once results are in
        self.seen_running = False  # the job was seen in a state past the queue

    @property
    def job_id(self) -> str:
        """The scheduler's job id (the process id for the local executor)."""
        return str(self._job.job_id)

    @property
    def folder(self) -> Path:
        """Where submitit keeps this job's pickles and logs."""
        return Path(self._job.paths.folder)

    @property
    def nodelist(self) -> tuple[str, ...]:
        """The nodes the job is pinned to (empty: wherever Slurm puts it)."""
        return self.spec.nodelist

    # ------------------------------------------------------------------ what each backend fills in

    @abstractmethod
    def _state(self, force: bool) -> str:
        """The job's state now; ``force``: read afresh rather than from what was last read."""

    @abstractmethod
    def _nodes(self) -> tuple[str, ...]:
        """The nodes the job runs or ran on."""

    @abstractmethod
    def _has_ended(self, state: str) -> bool:
        """The backend says the job ended (its results may be missing)."""

    @abstractmethod
    def _stop(self) -> None:
        """Stop the job; OSError or GpuClusterError when it could not be asked to."""

    @abstractmethod
    def _wait(self) -> str:
        """Block until the job ends, within the queue and wall-time bounds; returns its state."""

    def _lost_in_failure(
        self,
        message: str,
        final: str,
        nodes: tuple[str, ...],
        failed: list[tuple[int, str]],
        where: list[str],
        out: list[TaskResult[R]],
        learn_lost: bool,
    ) -> tuple[dict[str, str], str]:
        """For a job some tasks of which failed: the nodes lost under it (node → why) and the
        message, said again where the loss explains the failures; by default, none."""
        return {}, message

    def _after_results(self) -> None:
        """Once every result is written, or their wait ended: anything the backend waits for
        before the results are read."""

    def never_started(self) -> str | None:
        """For a job that ended: the scheduler's state and reason when it never ran, else None."""
        return None

    # ------------------------------------------------------------------ the wait

    def wait(self) -> str:
        """Block until the job ends, within the queue and wall-time bounds; returns its state."""
        if self._final_state is not None:
            return self._final_state
        return self._wait()

    def _finished(self, state: str) -> bool:
        # Looks from the first task not yet seen with a result: one file per poll while the job
        # runs, however many tasks it has (512 at 64 × 8 on a shared filesystem).
        tasks = self._tasks()
        while self._written < len(tasks) and tasks[self._written].paths.result_pickle.exists():
            self._written += 1
        if self._written == len(tasks):
            return True
        self._some_results = self._written > 0
        return self._has_ended(state)

    def _seen(self, state: str, last_state: str, pending_reason: str = "") -> None:
        """Note a state read: the job ran once it is past the queue; a change is told, with the
        reason a PENDING job waits."""
        if rules.has_run(state):
            self.seen_running = True
        if state != last_state:
            self._launcher.status(self.job_id, state, pending_reason if state == "PENDING" else "")

    def _ended(self, state: str) -> str:
        """The job ended in ``state``: it is no longer watched."""
        self._done = True
        self._final_state = state
        self._watcher.unwatch(self.job_id)
        return state

    def _within_limit(self, state: str, running_s: float) -> None:
        """Cancel and raise WallTimeoutError once the job ran past its limit and Slurm's grace."""
        over = rules.over_time_limit(state, running_s, self.spec.timeout_min)
        if over is not None:
            raise self._give_up(over, state)

    def _cancelled_for_failed_task(self, now: float) -> bool:
        """Every ``rules.FAILED_SCAN_S``: cancel the job when a task failed over
        ``failed_task_grace_s`` ago and another one still runs; True once it was."""
        if now - self._last_failed_scan < rules.FAILED_SCAN_S:
            return False
        self._last_failed_scan = now
        if not self._a_task_failed_long_ago(now):
            return False
        self.cancel()
        return True

    def _a_task_failed_long_ago(self, now: float) -> bool:
        """True when a task failed over ``failed_task_grace_s`` ago and another one still runs."""
        tasks = self._tasks()
        if len(tasks) < 2:
            return False
        for index in sorted(files.written_results(self.folder, self.job_id, len(tasks)) - self._checked_pickles):
            read = files.peek_result(Path(tasks[index].paths.result_pickle))
            if read is None:
                continue
            self._checked_pickles.add(index)
            outcome, payload = read
            if outcome == "error":
                self._failed_tasks[index] = files.last_error_line(str(payload).strip().splitlines())
                self._first_failure = self._first_failure or now
        grace = self._launcher.failed_task_grace_s
        return rules.task_failed_long_ago(self._first_failure, now, grace, len(self._checked_pickles), len(tasks))

    def cancel(self) -> None:
        """Cancel the job unless it already ended."""
        if not self._done:
            try:
                self._stop()
            except (OSError, GpuClusterError):
                pass  # scancel missing, the job gone, or slurmctld away past the window: nothing to stop
            self._done = True
        self._watcher.unwatch(self.job_id)

    # ------------------------------------------------------------------ the errors of this job

    def _tasks(self) -> list[submitit.Job[TaskOutput[R]]]:
        n = self.spec.nodes * self.spec.tasks_per_node
        return [self._job.task(i) for i in range(n)] if n > 1 else [self._job]

    def _ran_on(self, *, answered: bool = False) -> tuple[str, ...]:
        """The nodes a failed job is said to have run on (``rules.ran_on``): the backend's list,
        or its pin where the list holds part of it, or none of it although a task ``answered``."""
        return rules.ran_on(self._nodes(), self.spec.nodelist, self.spec.nodes, answered=answered)

    def _error(
        self, cls: type[LaunchError], message: str, state: str, *, ran_on: tuple[str, ...] | None = None, **extra: Any
    ) -> LaunchError:
        """The error of this job, on the nodes it ran on: ``ran_on`` where the caller already
        knows them (Slurm is not asked twice), else ``_ran_on()``."""
        given = self._ran_on() if ran_on is None else ran_on
        nodes = given or tuple(self.spec.nodelist)
        logs = tuple(str(p) for t in self._tasks()[:2] for p in (t.paths.stdout, t.paths.stderr))
        tail = ""
        for t in self._tasks():
            tail = files.tail(Path(t.paths.stderr))
            if tail:
                break
        where = f" on {', '.join(given)}" if given else ""
        return cls(
            f"job {self.job_id} ({self.spec.name}){where}: {message}",
            job_id=self.job_id,
            state=state,
            nodes=nodes,
            log_paths=logs,
            stderr_tail=tail,
            **extra,
        )

    def _give_up(self, decision: rules.GiveUp, state: str, **extra: Any) -> LaunchError:
        """Cancel the job and build the error of a rule's decision; nodes it names as lost are
        learned by the run."""
        self.cancel()
        if decision.error is NodeLostError:
            return self._node_lost(decision.message, state, dict(decision.lost))
        err = self._error(decision.error, decision.message, state, **extra)
        if decision.fault_sentence and isinstance(err, ClusterFault):
            err.fault_sentence = decision.fault_sentence
        return err

    def _node_lost(
        self, message: str, state: str, lost: dict[str, str], *, ran_on: tuple[str, ...] | None = None
    ) -> NodeLostError:
        how = f"under job {self.job_id} ({self.spec.name}), {state}"
        self._watcher.lost.learn(lost, job_id=self.job_id, how=how)
        self._launcher.status(self.job_id, "NODE_FAIL", "; ".join(f"{n} is {why}" for n, why in lost.items()))
        err = self._error(NodeLostError, message, state, ran_on=ran_on, lost=lost)
        assert isinstance(err, NodeLostError)
        return err

    # ------------------------------------------------------------------ the results

    def results(self, *, lag_s: float | None = None, learn_lost: bool = True) -> list[TaskResult[R]]:
        """One result per task, ordered by rank; a failed task raises LaunchError naming it.
        ``lag_s``: how long missing results are waited for after the job ended (by default
        10 s after a completed job, 3 s after a failed one), for a caller that knows a task
        will not write one. A node none of whose tasks wrote anything while another node's did
        (a failed task launch, a dead slurmd) is lost for the rest of the run, unless
        ``learn_lost`` is false (a job that kills a task on purpose)."""
        state = self.wait()
        tasks = self._tasks()
        # Results may lag the job's end on a shared filesystem: wait for them once, not per task.
        deadline = time.monotonic() + rules.result_lag_s(state, lag_s)
        while len(files.written_results(self.folder, self.job_id, len(tasks))) < len(tasks):
            if time.monotonic() >= deadline:
                break
            time.sleep(0.5)
        self._after_results()
        missing = "no result"
        if self._failed_tasks:
            first = min(self._failed_tasks)
            grace = self._launcher.failed_task_grace_s
            missing += f" (still running {grace:.0f} s after task {first} failed; cancelled)"
        read = files.read_tasks(self.job_id, [Path(t.paths.result_pickle) for t in tasks], missing)
        for index, watch in read.watches.items():
            self._launcher.keep_watch(self.job_id, index, watch)
        out: list[TaskResult[R]] = read.results
        self._note_ran(out)
        if read.unusable:
            raise self._environment_fault(read.unusable)
        if read.mismatched:
            raise self._setting_fault(read.mismatched, {r.node for r in out})
        if read.failed:
            self._raise_failed(state, read.failed, out, learn_lost)
        return sorted(out, key=lambda r: r.rank)

    def _note_ran(self, out: list[TaskResult[R]]) -> None:
        """When the tasks' processes and workloads ran, for the session's timing."""
        spans = [(r.started, r.ended) for r in out if r.started and r.ended]
        self.process_started = min((r.process_started for r in out if r.process_started), default=0.0)
        self.start_up = start_up_summary(out)
        if spans and self.on_ran is not None:
            self.on_ran(min(a for a, _ in spans), max(b for _, b in spans))

    def _environment_fault(self, records: list[TorchGpuMismatch]) -> EnvironmentFault:
        """The run's environment cannot use the GPUs of the nodes these tasks ran on: one fault
        naming the environment and every such node, not a failure of any node."""
        first = records[0]
        nodes = hostlist(sorted({r.node for r in records}))
        detail = f"{first.error or 'torch sees no GPU'} (NVML sees {first.nvml_gpus} GPU(s))"
        fault = EnvironmentFault.torch_cannot_use_gpus(first.what(), nodes, detail, f"{self.job_id} ({self.spec.name})")
        fault.job_id, fault.nodes = self.job_id, tuple(sorted({r.node for r in records}))
        return fault

    def _setting_fault(self, records: list[SettingMismatch], answered: set[str]) -> LaunchError:
        """A network setting that matched nothing: on every node of the job, the run's
        configuration (one fault, no node judged); on some nodes while others have it, those nodes
        (their failure, the setting and what they offer named)."""
        first = records[0]
        bad = sorted({r.node for r in records})
        listed = self._ran_on()
        ran = set(listed or self.spec.nodelist) | answered | set(bad)
        given = {**self._launcher.env, **(self.spec.env or {})}
        origin = "the profile's env" if first.variable in given else "the login node's environment"
        offered = ", ".join(first.offered) or "none"
        if set(bad) >= ran:
            return ConfigFault.of_setting(
                f"{first.what()} (from {origin}) matches nothing on {hostlist(bad)}, which offer {offered}",
                setting=first.variable,
                nodes=tuple(bad),
                job=f"{self.job_id} ({self.spec.name})",
            )
        said = "; ".join(r.sentence() for r in records if r.node in bad)
        message = f"{said}, while {hostlist(sorted(ran - set(bad)))} match it (from {origin})"
        return self._error(LaunchError, message, "FAILED", ran_on=listed, culprits=tuple(bad))

    def _final(self, state: str) -> str:
        """The state a failed job's error names: the one its wait ended in, unless the backend
        reads a later one."""
        return state

    def _raise_failed(
        self, state: str, failed: list[tuple[int, str]], out: list[TaskResult[R]], learn_lost: bool
    ) -> None:
        """Raise the error of a job some tasks of which failed: NodeLostError when nodes under it
        were lost or stayed silent (``_lost_in_failure``), else LaunchError naming each failed
        task and its node."""
        # A task's result names its node; the backend is asked only for the tasks that failed.
        nodes = self._ran_on(answered=bool(out))
        per_node = self.spec.tasks_per_node
        where = [nodes[i // per_node] if len(nodes) == self.spec.nodes else "?" for i, _ in failed]
        failures = [f"task {index} on {node}: {why}" for (index, why), node in zip(failed, where, strict=True)]
        final = self._final(state)
        message = f"ended {final} with {len(failures)} failed task(s): " + "; ".join(failures)
        lost, message = self._lost_in_failure(message, final, nodes, failed, where, out, learn_lost)
        if lost:
            message += "; " + ", ".join(f"{n} is {why}" for n, why in lost.items())
            answered = sorted(out, key=lambda r: r.rank)
            err = self._node_lost(message, final, lost, ran_on=nodes)
            err.answered = list(answered)
            raise err
        culprits = tuple(n for n in dict.fromkeys(where) if n != "?")
        raise self._error(LaunchError, message, final, ran_on=nodes, culprits=culprits)

"""A submitted job as a future (the submitit implementation of ``launch.Job``): its wait reads
Slurm through the launcher's shared ``SlurmWatcher`` and ends by the rules of ``wait_rules``;
its results are read from the task files (``task_files``).

Every wait is bounded: a job may stay PENDING for ``queue_timeout_s`` and RUN for its time limit
plus a grace period; past either it is cancelled and a LaunchError names the job, its state, its
nodes, its logs and the end of its stderr. A job that ended without results is reported at once
instead of after submitit's own per-task grace period.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol, TypeVar

import submitit

from pytest_gpucluster import slurm
from pytest_gpucluster.errors import (
    ClusterFault,
    ConfigFault,
    DaemonUnreachable,
    EnvironmentFault,
    GpuClusterError,
    LaunchError,
    NodeLostError,
)
from pytest_gpucluster.faults import foreign_work, held_sentence, other_work, srun_missed_controller
from pytest_gpucluster.launch import Job, JobSpec, TaskResult, start_up_summary
from pytest_gpucluster.launch import task_files as files
from pytest_gpucluster.launch import wait_rules as rules
from pytest_gpucluster.launch.node import TaskOutput
from pytest_gpucluster.launch.watcher import SlurmWatcher
from pytest_gpucluster.ranges import hostlist
from pytest_gpucluster.slurm import Holder
from pytest_gpucluster.workloads.gpu_environment import TorchGpuMismatch
from pytest_gpucluster.workloads.net_settings import SettingMismatch
from pytest_gpucluster.workloads.xid import XidWatch

R = TypeVar("R")

# Local executor: how long a job's processes may take to end after the last result was written.
LOCAL_EXIT_LIMIT_S = 10.0


class Owner(Protocol):
    """What a job reads of the launcher that submitted it (``SubmititLauncher``)."""

    @property
    def watcher(self) -> SlurmWatcher: ...

    @property
    def executor(self) -> str: ...

    @property
    def queue_timeout_s(self) -> float: ...

    @property
    def poll_s(self) -> float: ...

    @property
    def failed_task_grace_s(self) -> float: ...

    @property
    def run_prefix(self) -> str: ...

    @property
    def env(self) -> dict[str, str]: ...  # what every job's tasks get in their environment (the profile's env)

    def status(self, job_id: str, state: str, reason: str) -> None: ...

    def shape_hint(self, spec: JobSpec) -> str: ...

    def keep_watch(self, job_id: str, task: int, watch: XidWatch | None) -> None: ...


class SubmititJob(Job[R]):
    """A submitted job with a bounded wait. It asks Slurm nothing itself: its launcher's watcher
    does, once for every job waited on."""

    def __init__(self, job: submitit.Job[TaskOutput[R]], spec: JobSpec, launcher: Owner) -> None:
        self._job = job
        self.spec = spec
        self._launcher = launcher
        self._watcher = launcher.watcher
        self._outages = launcher.watcher.client.outages  # the run's record of the daemons' outages
        self._slurm = launcher.executor == "slurm"
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
        self.pending_reason = ""  # Slurm's last reason the job waited in the queue
        self.seen_running = False  # the job was seen in a state past the queue
        self._own_checked_at = 0.0  # past queue_timeout_s: when the jobs holding its nodes were last asked for
        self._holders_seen: list[Holder] = []

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

    def _tasks(self) -> list[submitit.Job[TaskOutput[R]]]:
        n = self.spec.nodes * self.spec.tasks_per_node
        return [self._job.task(i) for i in range(n)] if n > 1 else [self._job]

    def _state(self, force: bool) -> str:
        if not self._slurm:
            return str(self._job.state).upper()
        return self._watcher.job_state(self._job, force)

    def _nodes(self) -> tuple[str, ...]:
        """The nodes the job runs or ran on (this machine for the local executor)."""
        if not self._slurm:
            return (socket.gethostname(),)
        return self._watcher.job_nodes(self.job_id, self.spec.nodes)

    def _ran_on(self, *, answered: bool = False) -> tuple[str, ...]:
        """The nodes a failed job is said to have run on (``rules.ran_on``): Slurm's list, or its
        pin where Slurm lists part of it, or none of it although a task ``answered``."""
        return rules.ran_on(self._nodes(), self.spec.nodelist, self.spec.nodes, answered=answered)

    def _finished(self, state: str) -> bool:
        # Looks from the first task not yet seen with a result: one file per poll while the job
        # runs, however many tasks it has (512 at 64 × 8 on a shared filesystem).
        tasks = self._tasks()
        while self._written < len(tasks) and tasks[self._written].paths.result_pickle.exists():
            self._written += 1
        if self._written == len(tasks):
            return True
        self._some_results = self._written > 0
        if not self._slurm:
            return state != "RUNNING"
        return rules.has_ended(state) or self._watcher.sacct_done(self._job)

    def cancel(self) -> None:
        """Cancel the job unless it already ended."""
        if not self._done:
            try:
                if self._slurm:
                    slurm.cancel(
                        self._watcher.client, self.job_id
                    )  # tried again while slurmctld restarts (slurm_retry)
                else:
                    with self._watcher.submitit_lock:
                        self._job.cancel(check=False)
            except (OSError, GpuClusterError):
                pass  # scancel missing, the job gone, or slurmctld away past the window: nothing to stop
            self._done = True
        self._watcher.unwatch(self.job_id)

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

    def _holders(self) -> list[Holder]:
        """The other jobs on the nodes this job is pinned to; empty when Slurm cannot say."""
        if not self._slurm:
            return []
        try:
            return self._watcher.holders(self.spec.nodelist, besides=self.job_id)
        except Exception:  # a nicety for the message; the timeout itself stands
            return []

    def wait(self) -> str:
        """Block until the job ends, within the queue and wall-time bounds; returns its state."""
        if self._final_state is not None:
            return self._final_state
        queue_limit = self._launcher.queue_timeout_s
        started: float | None = None
        last_state = ""
        last_sacct = last_node_check = last_requeue_check = 0.0
        pending_reason = ""
        not_responding: dict[str, float] = {}
        # A job PENDING behind a job of this run that Slurm is still ending on a node the run lost,
        # or just after a controller outage, waits for Slurm, not for a fault of its own nodes
        # (``rules.excused_s``).
        excused = 0.0
        behind_lost = ""
        was_behind = nudged = False
        never_since: float | None = None  # when a reason that no wait cures was first read
        last_loop = time.monotonic()
        while True:
            now = time.monotonic()
            recovering = rules.is_waiting(last_state) and rules.after_outage(self._outages.ended_ago("slurmctld"))
            excused = rules.excused_s(excused, now - last_loop, was_behind or recovering, queue_limit)
            last_loop = now
            force = now - last_sacct >= rules.state_every(now - self.submitted_at, self._some_results)
            if force:
                last_sacct = now
            state = self._state(force)
            if state == "PENDING" and self._slurm and (force or state != last_state):
                # Kept fresh while it waits: at the timeout the controller may be too busy to answer.
                pending_reason = self._watcher.pending_reason(self.job_id) or pending_reason
                self.pending_reason = pending_reason
            if rules.has_run(state):
                self.seen_running = True
            if state != last_state:
                self._launcher.status(self.job_id, state, pending_reason if state == "PENDING" else "")
                last_state = state
            if self._finished(state):
                self._done = True
                self._final_state = state
                self._watcher.unwatch(self.job_id)
                if self._slurm and not rules.has_ended(state):
                    self._watcher.note_ending(self.job_id)
                return state
            if rules.is_waiting(state) and started is None:
                never_since = rules.never_starts_since(pending_reason, never_since, now)
                if rules.never_starts_confirmed(never_since, now):
                    hint = self._launcher.shape_hint(self.spec) if rules.needs_shape_hint(pending_reason) else ""
                    decision = rules.never_starts(state, pending_reason, queue_limit, self.spec.timeout_min, hint)
                    raise self._give_up(decision, state)
                check_every = rules.BEHIND_LOST_CHECK_S if was_behind and not nudged else rules.NODE_CHECK_S
                if self.spec.nodelist and self._slurm and now - last_node_check >= check_every:
                    last_node_check = now
                    unusable = self._watcher.unusable(self.spec.nodelist)
                    pinned = rules.pinned_unusable(state, pending_reason, unusable)
                    if pinned is not None:
                        raise self._give_up(pinned, state)
                    ending = self._watcher.ending_on_lost(self.spec.nodelist, self.job_id)
                    if ending and ending != behind_lost:
                        self._launcher.status(self.job_id, state, f"waits for Slurm to end {ending}")
                    if was_behind and not ending and not nudged:
                        nudged = True  # its nodes are free now: have Slurm look at it at once
                        self._watcher.nudge(self.job_id)
                    behind_lost = ending
                    was_behind = was_behind or bool(ending)
                down = self._outages.down_s("slurmctld")
                if down is not None and rules.controller_gone(down, self._outages.window_s):
                    fault = DaemonUnreachable("slurmctld", down, self._outages.first_error("slurmctld"))
                    fault.fault_sentence = self._outages.sentence("slurmctld")
                    raise fault
                outage = self._outages.downtime("slurmctld", self.submitted_at)
                counted = rules.queue_time_counted(now - self.submitted_at, excused, outage)
                if counted > queue_limit and not self._behind_own_jobs(counted - queue_limit, now):
                    raise self._queue_timeout(state, pending_reason, queue_limit, excused)
            elif state in rules.REQUEUED and self._slurm:
                if now - last_requeue_check >= rules.REQUEUE_CHECK_S:
                    last_requeue_check = now
                    if rules.requeued(state, self._watcher.controller_state(self.job_id)):
                        lost = self._watcher.lost_among(self._nodes(), max_age_s=0)
                        raise self._give_up(rules.nodes_lost(state, lost, was_requeued=True), state)
                started = started or now  # a job is only ever requeued after it started
                self._within_limit(state, now - started)
            elif not rules.is_waiting(state):
                started = started or now
                self._within_limit(state, now - started)
                if self._slurm and now - last_node_check >= rules.NODE_CHECK_S:
                    last_node_check = now
                    lost = self._watcher.lost_among(self._nodes())
                    not_responding = rules.not_responding_since(lost, not_responding, now)
                    if rules.lost_while_running(lost, not_responding, now):
                        raise self._give_up(rules.nodes_lost(state, lost), state)
                if now - self._last_failed_scan >= rules.FAILED_SCAN_S:
                    self._last_failed_scan = now
                    if self._a_task_failed_long_ago(now):
                        self.cancel()
                        return "CANCELLED"
            time.sleep(self._launcher.poll_s)

    def _behind_own_jobs(self, over_s: float, now: float) -> bool:
        """``rules.behind_own_run`` for this job, Slurm asked at most every few seconds."""
        if not self._slurm or not self.spec.nodelist:
            return False
        if now - self._own_checked_at >= rules.NODE_CHECK_S:
            self._own_checked_at = now
            self._holders_seen = self._holders()
        return rules.behind_own_run(over_s, self.spec.timeout_min, self._holders_seen, self._launcher.run_prefix)

    def _queue_timeout(self, state: str, pending_reason: str, queue_limit: float, excused: float) -> LaunchError:
        """Cancel a job still waiting past queue_timeout_s and build its error, naming what holds
        its nodes; other work that holds them makes it a fault outside the nodes."""
        reason = (self._watcher.pending_reason(self.job_id) if self._slurm else "") or pending_reason
        holders = self._holders()
        held = self._watcher.what_holds(self.spec.nodelist, holders) if self._slurm else ""
        other = other_work(holders, self._launcher.run_prefix)
        sentence = held_sentence(other, self.spec.nodelist, queue_limit) if other else ""
        recovering = rules.after_outage(self._outages.ended_ago("slurmctld"))
        controller = self._outages.sentence("slurmctld") if recovering else ""
        decision = rules.queue_timeout(
            state, queue_limit, excused, reason, held, bool(other), sentence, controller_sentence=controller
        )
        # Foreign work is learned as holding its nodes for the run (context.note_fault); another
        # run of the suite takes turns with this one, and each job's own wait stays bounded.
        by_node = {n: h.describe() for h in foreign_work(other) for n in h.nodes if n in self.spec.nodelist}
        return self._give_up(decision, state, held=by_node)

    def _within_limit(self, state: str, running_s: float) -> None:
        """Cancel and raise WallTimeoutError once the job ran past its limit and Slurm's grace."""
        over = rules.over_time_limit(state, running_s, self.spec.timeout_min)
        if over is not None:
            raise self._give_up(over, state)

    def never_started(self) -> str | None:
        """For a job that ended: Slurm's state and reason when it never ran (cancelled or given up
        in the queue, so no node was allocated to it), else None."""
        if not self._slurm:
            return None
        ran = self.seen_running or bool(self._nodes())  # it had nodes: it started, however briefly
        record = {} if ran else self._watcher.controller_job(self.job_id)
        last = self._final_state or self._watcher.last_queue_state(self.job_id)
        return rules.never_started(ran, record, last, self.pending_reason)

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

    def _until_processes_end(self, limit_s: float) -> None:
        """Local executor: results are read as soon as they are written. Wait (bounded) for the
        job's processes to end as well, so the next job does not share the GPUs with their exit
        and no process is left behind unreaped (Python warns about those)."""
        deadline = time.monotonic() + limit_s
        while self._state(force=True) == "RUNNING" and time.monotonic() < deadline:
            time.sleep(0.05)

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
        if not self._slurm:
            self._until_processes_end(LOCAL_EXIT_LIMIT_S)
        out: list[TaskResult[R]] = []
        failed: list[tuple[int, str]] = []  # (task index, why)
        unusable: list[TorchGpuMismatch] = []  # tasks whose torch could not use the GPUs NVML sees
        mismatched: list[SettingMismatch] = []  # tasks whose network setting matched nothing on their node
        for index, task in enumerate(tasks):
            if not task.paths.result_pickle.exists():
                why = "no result"
                if self._failed_tasks:
                    first = min(self._failed_tasks)
                    grace = self._launcher.failed_task_grace_s
                    why += f" (still running {grace:.0f} s after task {first} failed; cancelled)"
                failed.append((index, why))
                continue
            # Read the task's result file directly: submitit's own result() also waits for the
            # process to exit (a second or more for a local task tearing down torch and CUDA).
            outcome, output = files.read_result(Path(task.paths.result_pickle))
            if outcome != "success":
                failed.append((index, files.last_error_line(str(output).strip().splitlines())))
                self._launcher.keep_watch(self.job_id, index, files.left_watch(Path(task.paths.result_pickle)))
                record = files.left_environment(Path(task.paths.result_pickle))
                if isinstance(record, TorchGpuMismatch):
                    unusable.append(record)
                elif isinstance(record, SettingMismatch):
                    mismatched.append(record)
                continue
            ctx = output.context
            watch = getattr(output, "xid", None)
            self._launcher.keep_watch(self.job_id, index, watch)
            out.append(
                TaskResult(
                    self.job_id,
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
        self._note_ran(out)
        if unusable:
            raise self._environment_fault(unusable)
        if mismatched:
            raise self._setting_fault(mismatched, {r.node for r in out})
        if failed:
            self._raise_failed(state, failed, out, learn_lost)
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

    def _raise_failed(
        self, state: str, failed: list[tuple[int, str]], out: list[TaskResult[R]], learn_lost: bool
    ) -> None:
        """Raise the error of a job some tasks of which failed: a fault of the controller when
        srun could not reach it, NodeLostError when nodes under it were lost or stayed silent,
        else LaunchError naming each failed task and its node."""
        # A task's result names its node; Slurm is asked only for the tasks that failed.
        nodes = self._ran_on(answered=bool(out))
        per_node = self.spec.tasks_per_node
        where = [nodes[i // per_node] if len(nodes) == self.spec.nodes else "?" for i, _ in failed]
        failures = [f"task {index} on {node}: {why}" for (index, why), node in zip(failed, where, strict=True)]
        final = self._state(force=True) if self._slurm else state
        message = f"ended {final} with {len(failures)} failed task(s): " + "; ".join(failures)
        stderr = self._batch_stderr()
        missed = srun_missed_controller(stderr)
        if missed:
            # srun could not ask slurmctld for the job step: no task ran, on no node's account.
            fault = DaemonUnreachable.for_step(self.job_id, self.spec.name, missed)
            fault.fault_sentence = self._outages.sentence("slurmctld") or fault.fault_sentence
            raise fault
        lost = self._watcher.lost_among(nodes, max_age_s=0) if self._slurm else {}
        unreached = files.launch_failures(stderr) if learn_lost else {}
        if unreached:
            # srun cancels the tasks it did start when one node's launch fails: those are
            # not the culprits, the node it could not reach is.
            others = [f for f, node in zip(failures, where, strict=True) if node not in unreached]
            message = f"ended {final}: srun could not start its tasks on {', '.join(unreached)}" + (
                f" and ended the other {len(others)}" if others else ""
            )
            lost = {**lost, **unreached}  # srun's reason says more than the node's state
        if not lost and learn_lost and self._slurm:
            tasks = self._tasks()
            logged = {i for i, t in enumerate(tasks) if Path(t.paths.stdout).exists() or Path(t.paths.stderr).exists()}
            wrote = {node for (i, _), node in zip(failed, where, strict=True) if i in logged}
            no_files = {node for node in where if node != "?" and node not in wrote}
            lost = rules.silent_nodes(failed, where, {r.node for r in out}, self.job_id, final, no_files)
        if lost:
            message += "; " + ", ".join(f"{n} is {why}" for n, why in lost.items())
            answered = sorted(out, key=lambda r: r.rank)
            err = self._node_lost(message, final, lost, ran_on=nodes)
            err.answered = list(answered)
            raise err
        culprits = tuple(n for n in dict.fromkeys(where) if n != "?")
        raise self._error(LaunchError, message, final, ran_on=nodes, culprits=culprits)

    def _batch_stderr(self) -> str:
        """The end of the batch step's stderr, where srun says what it could not do (Slurm only)."""
        tasks = self._tasks()
        if not self._slurm or not tasks:
            return ""
        return files.tail(Path(tasks[0].paths.stderr), lines=200)

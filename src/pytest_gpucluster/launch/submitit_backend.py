"""The launcher over submitit: Slurm through ``AutoExecutor(cluster="slurm")``, this machine
through submitit's local executor. With ``node`` (what runs in the job), the only module that
imports submitit.

Every wait here is bounded: a job may stay PENDING for ``queue_timeout_s`` and RUN for its time
limit plus a grace period; past either it is cancelled and a LaunchError names the job, its state,
its nodes, its logs and the end of its stderr. While a job runs, the wait also ends early (job
cancelled, error naming the node) when a node under it goes down or stops answering Slurm, when
Slurm puts it back in the queue (requeue after a node failure), or when one task failed and the
others are still running well after (a hung rank); a job that ended without results is reported
at once instead of after submitit's own per-task grace period.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as _dt
import logging
import os
import pickle
import re
import shutil
import socket
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, TypeVar

import submitit

from pytest_gpucluster import slurm
from pytest_gpucluster.errors import (
    DaemonUnreachable,
    GpuClusterError,
    LaunchError,
    NodeLostError,
    QueueHeldError,
    QueueTimeoutError,
    SharedFsFault,
    WallTimeoutError,
)
from pytest_gpucluster.faults import held_sentence, other_work, srun_missed_controller
from pytest_gpucluster.launch import Job, JobSpec, Launcher, StatusCallback, TaskResult, start_up_summary
from pytest_gpucluster.launch.node import TaskOutput, run_on_node, xid_path
from pytest_gpucluster.slurm_retry import OUTAGES
from pytest_gpucluster.workloads.xid import XidWatch

R = TypeVar("R")

# A line of every batch script, before srun starts the tasks. submitit's task entry imports
# numpy before anything else, and numpy's OpenBLAS starts a thread per core of the node in every
# task, which multiplies each task's start-up CPU several times over (docs/scale.md, "What a
# task's imports cost"). No workload here uses numpy's BLAS; a value the user exported is kept.
TASK_SETUP = "export OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-1}"

# States in which a job has not started to run yet.
_WAITING = {"PENDING", "REQUEUED", "UNKNOWN", "CONFIGURING", "READY"}
# Slurm's final job states (as squeue/scontrol say them; "CANCELLED by 0" included).
_ENDED = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE")
# Past the job's own time limit, Slurm needs a moment to kill it and submitit to notice.
_GRACE_S = 90.0
_SACCT_EVERY_S = 3.0
# For a job's first _QUICK_LOOK_S, its state is asked for this often: a short job that ends
# without results (a task crashed or was killed) is then seen gone within half a second.
_QUICK_STATE_S = 0.5
# Once some tasks of a job have their results, the job is about to end (or a task failed): its
# state is asked for this often instead, so its end is seen without waiting out _SACCT_EVERY_S.
_ENDING_CHECK_S = 0.5
# Back in the queue after it ran: Slurm requeued it (after a node failure, by default).
_REQUEUED = {"PENDING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED"}
# How often the nodes under a running job are checked, and how long one may stay NOT_RESPONDING
# (a busy slurmd misses a ping now and then) before the job is given up; DOWN ends it at once.
_NODE_CHECK_S = 5.0
# Pending reasons no wait can cure: only a change to Slurm's configuration, the partition or the
# account would (squeue(1), "JOB REASON CODES"). A job held on one is cancelled once the reason
# has stood this long, not after queue_timeout_s.
_NEVER_STARTS = {
    "PartitionConfig": "the partition cannot hold the job as asked",
    "PartitionTimeLimit": "the job's time limit is above the partition's",
    "BadConstraints": "no node satisfies the job's constraints",
    "InvalidAccount": "the account is not valid",
    "InvalidQOS": "the QOS is not valid",
    "DependencyNeverSatisfied": "its dependency can never be satisfied",
}
_NEVER_CONFIRM_S = 2.0
_NOT_RESPONDING_GRACE_S = 10.0
# After one task failed, how long the others may go on (they may be failing too, just slower)
# before the job is cancelled: a rank that hangs outside a collective would hold it to its limit.
_FAILED_TASK_GRACE_S = 20.0
# How long results may lag behind the end of the job on a shared filesystem.
_RESULT_LAG_S = 10.0
# For this long after submission the job's state is asked for every _QUICK_STATE_S, then every
# _SACCT_EVERY_S (result files are looked for every poll_s throughout).
_QUICK_LOOK_S = 30.0
# How often the result files of all tasks are read for a failed task while the job runs.
_FAILED_SCAN_S = 1.0
# Local executor: how long a job's processes may take to end after the last result was written.
_LOCAL_EXIT_LIMIT_S = 10.0
# At a run's normal end: how long jobs whose results were all read may take to leave the queue by
# themselves (their tasks end once their result is written) before they are cancelled.
_SETTLE_S = 10.0
_SETTLE_POLL_S = 0.1


def _tail(path: Path, lines: int = 25) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    return "\n".join(text.rstrip().splitlines()[-lines:])


def _excused_clause(excused_s: float) -> str:
    """What a queue timeout's message adds for the time not counted (behind a job still ending
    on a lost node)."""
    if excused_s < 1:
        return ""
    return f" (and {excused_s:.0f} s more after it waited behind a job Slurm was ending on a lost node)"


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


class SubmititJob(Job[R]):
    """A submitted job with a bounded wait (the submitit implementation of ``launch.Job``)."""

    def __init__(
        self,
        job: submitit.Job[TaskOutput[R]],
        spec: JobSpec,
        launcher: SubmititLauncher,
    ) -> None:
        self._job = job
        self.spec = spec
        self._launcher = launcher
        self._done = False
        self._queue_state = ""
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
        if self._launcher.executor == "local":
            return str(self._job.state).upper()
        mode = "force" if force else "cache"
        with self._launcher.submitit_lock, self._launcher.sacct_quiet():
            state = str(self._job.watcher.get_state(self.job_id, mode=mode)).upper()
        if state == "UNKNOWN" and force:
            # No accounting (sacct fails) or not recorded yet: ask the queue instead. A job the
            # queue no longer knows has ended, so the wait cannot outlive it.
            try:
                queued = self._launcher._queue_state(self.job_id)
            except Exception:
                return state
            self._queue_state = queued or "GONE"
        if state == "UNKNOWN" and self._queue_state:
            return self._queue_state
        return state

    def _finished(self, state: str) -> bool:
        # Looks from the first task not yet seen with a result: one file per poll while the job
        # runs, however many tasks it has (512 at 64 × 8 on a shared filesystem).
        tasks = self._tasks()
        while self._written < len(tasks) and tasks[self._written].paths.result_pickle.exists():
            self._written += 1
        if self._written == len(tasks):
            return True
        self._some_results = self._written > 0
        if self._launcher.executor == "local":
            return state != "RUNNING"
        if state == "GONE" or state.startswith(_ENDED):
            return True
        with self._launcher.submitit_lock:
            return bool(self._job.watcher.is_done(self.job_id, mode="cache"))

    def cancel(self) -> None:
        """Cancel the job unless it already ended."""
        if not self._done:
            try:
                if self._launcher.executor == "slurm":
                    slurm.cancel(self.job_id)  # tried again while slurmctld restarts (slurm_retry)
                else:
                    with self._launcher.submitit_lock:
                        self._job.cancel(check=False)
            except (OSError, GpuClusterError):
                pass  # scancel missing, the job gone, or slurmctld away past the window: nothing to stop
            self._done = True
        self._launcher._forget(self)

    def _error(self, cls: type[LaunchError], message: str, state: str, **extra: Any) -> LaunchError:
        nodes = self._launcher._job_nodes(self.job_id, self.spec.nodes)
        logs = tuple(str(p) for t in self._tasks()[:2] for p in (t.paths.stdout, t.paths.stderr))
        tail = ""
        for t in self._tasks():
            tail = _tail(Path(t.paths.stderr))
            if tail:
                break
        where = f" on {', '.join(nodes)}" if nodes else ""
        return cls(
            f"job {self.job_id} ({self.spec.name}){where}: {message}",
            job_id=self.job_id,
            state=state,
            nodes=nodes,
            log_paths=logs,
            stderr_tail=tail,
            **extra,
        )

    def wait(self) -> str:
        """Block until the job ends, within the queue and wall-time bounds; returns its state."""
        if self._final_state is not None:
            return self._final_state
        queue_limit = self._launcher.queue_timeout_s
        run_limit = self.spec.timeout_min * 60 + _GRACE_S
        started: float | None = None
        last_state = ""
        last_sacct = 0.0
        last_node_check = 0.0
        pending_reason = ""
        not_responding_since: dict[str, float] = {}
        last_requeue_check = 0.0
        # A job PENDING behind a job of this run that Slurm is still ending on a node the run lost
        # waits for Slurm, not for a fault of its own nodes: from the moment it is seen there
        # until it starts, the wait does not count against queue_timeout_s, up to one more
        # queue_timeout_s.
        excused = 0.0
        behind_lost = ""
        was_behind = nudged = False
        never_since: float | None = None  # when a reason that no wait cures was first read
        last_loop = time.monotonic()
        while True:
            now = time.monotonic()
            if was_behind:
                excused = min(queue_limit, excused + now - last_loop)
            last_loop = now
            quick = now - self.submitted_at < _QUICK_LOOK_S
            every = _ENDING_CHECK_S if self._some_results else _QUICK_STATE_S if quick else _SACCT_EVERY_S
            force = now - last_sacct >= every
            if force:
                last_sacct = now
            state = self._state(force)
            if state == "PENDING" and self._launcher.executor == "slurm" and (force or state != last_state):
                # Kept fresh while it waits: at the timeout the controller may be too busy to answer.
                pending_reason = self._launcher._pending_reason(self.job_id) or pending_reason
                self.pending_reason = pending_reason
            if state not in _WAITING and state != "GONE" and not state.startswith(_ENDED):
                self.seen_running = True
            if state != last_state:
                self._launcher._status(self.job_id, state, pending_reason if state == "PENDING" else "")
                last_state = state
            if self._finished(state):
                self._done = True
                self._final_state = state
                self._launcher._forget(self)
                if self._launcher.executor == "slurm" and not (state == "GONE" or state.startswith(_ENDED)):
                    self._launcher._note_ending(self.job_id)
                return state
            if state in _WAITING and started is None:
                never_since = (never_since or now) if pending_reason in _NEVER_STARTS else None
                if never_since is not None and now - never_since >= _NEVER_CONFIRM_S:
                    self._never_starts(state, pending_reason, queue_limit)
                # Every second while it waits behind a lost node's ending job, to start it soon after.
                check_every = 1.0 if was_behind and not nudged else _NODE_CHECK_S
                if self.spec.nodelist and self._launcher.executor == "slurm" and now - last_node_check >= check_every:
                    last_node_check = now
                    self._check_pinned_nodes(state, pending_reason)
                    ending = self._launcher._ending_on_lost(self.spec.nodelist, self.job_id)
                    if ending and ending != behind_lost:
                        self._launcher._status(self.job_id, state, f"waits for Slurm to end {ending}")
                    if was_behind and not ending and not nudged:
                        nudged = True  # its nodes are free now: have Slurm look at it at once
                        self._launcher._nudge(self.job_id)
                    behind_lost = ending
                    was_behind = was_behind or bool(ending)
                down = OUTAGES.down_s("slurmctld")
                if down is not None and down >= OUTAGES.window_s:
                    # No job starts without the controller: a fault of the cluster, not of its nodes.
                    fault = DaemonUnreachable("slurmctld", down, OUTAGES.first_error("slurmctld"))
                    fault.fault_sentence = OUTAGES.sentence("slurmctld")
                    raise fault
                # Time slurmctld did not answer is the controller's, not the nodes': not counted.
                outage = OUTAGES.downtime("slurmctld", self.submitted_at)
                if now - self.submitted_at - excused - outage > queue_limit:
                    reason = self._launcher._pending_reason(self.job_id) or pending_reason or "reason unknown"
                    holders = self._launcher._holders(self.spec.nodelist, self.job_id)
                    held = self._launcher._what_holds(self.spec.nodelist, self.job_id, holders)
                    if held:
                        reason += f" ({held})"
                    other = other_work(holders, self._launcher.run_prefix)
                    self.cancel()
                    err = self._error(
                        QueueHeldError if other else QueueTimeoutError,
                        f"still {state} after {queue_limit:.0f} s{_excused_clause(excused)}: {reason}; cancelled. "
                        "Check the partition's nodes (sinfo) or raise queue_timeout_s.",
                        state,
                    )
                    if other:
                        assert isinstance(err, QueueHeldError)
                        err.fault_sentence = held_sentence(other, self.spec.nodelist, queue_limit)
                    raise err
            elif state in _REQUEUED and self._launcher.executor == "slurm":
                # Accounting can lag the controller: right after the start, sacct may still say
                # PENDING for a job squeue already showed running. Only slurmctld's own word
                # that the job is back in the queue makes it a requeue.
                if now - last_requeue_check >= 1.0:
                    last_requeue_check = now
                    if self._controller_state() in _REQUEUED:
                        self._give_up(state, {}, requeued=True)
                started = started or now  # a job is only ever requeued after it started
                self._within_limit(state, now - started, run_limit)
            elif state not in _WAITING:
                started = started or now
                self._within_limit(state, now - started, run_limit)
                if self._launcher.executor == "slurm" and now - last_node_check >= _NODE_CHECK_S:
                    last_node_check = now
                    self._check_nodes(state, now, not_responding_since)
                if now - self._last_failed_scan >= _FAILED_SCAN_S:
                    self._last_failed_scan = now
                    if self._a_task_failed_long_ago(now):
                        self.cancel()
                        return "CANCELLED"
            time.sleep(self._launcher.poll_s)

    def never_started(self) -> str | None:
        """For a job that ended: Slurm's state and reason when it never ran (cancelled or given up
        in the queue, so no node was allocated to it), else None."""
        if self.seen_running or self._launcher.executor != "slurm":
            return None
        if self._launcher._job_nodes(self.job_id, self.spec.nodes):
            return None  # it had nodes: it started, however briefly
        try:
            record = slurm.controller_job(self.job_id) or {}
        except Exception:  # the controller cannot say; what this process saw still does
            record = {}
        state = record.get("JobState") or self._final_state or self._queue_state or "ended"
        reason = record.get("Reason", "")
        if reason in ("", "None", "(null)"):
            reason = self.pending_reason
        waited = self.pending_reason if self.pending_reason not in ("", reason) else ""
        waited = f"; it waited for: {waited}" if waited else ""
        return f"Slurm says {state}" + (f", reason {reason}" if reason else "") + waited

    def _within_limit(self, state: str, running_s: float, limit_s: float) -> None:
        """Cancel and raise WallTimeoutError once the job ran past its limit and Slurm's grace."""
        if running_s > limit_s:
            self.cancel()
            raise self._error(
                WallTimeoutError,
                f"still {state} {running_s:.0f} s after it started, past its "
                f"{self.spec.timeout_min} min limit; cancelled (a hung or suspended job).",
                state,
            )

    def _controller_state(self) -> str | None:
        """The job's state as slurmctld has it (squeue, else scontrol); None when unknown."""
        try:
            return slurm.queue_state(self.job_id)
        except Exception:
            return None

    def _check_nodes(self, state: str, now: float, since: dict[str, float]) -> None:
        """Give up on the job when a node under it is DOWN, or NOT_RESPONDING for a while."""
        lost = self._launcher._lost_nodes(self._launcher._job_nodes(self.job_id, self.spec.nodes))
        for node in [n for n in since if n not in lost]:
            del since[node]
        for node in lost:
            since.setdefault(node, now)
        hard = [w for w in lost.values() if w.startswith("not known") or {"DOWN", "FAIL"} & _words(w)]
        if hard or any(now - t >= _NOT_RESPONDING_GRACE_S for t in since.values()):
            self._give_up(state, lost)

    def _never_starts(self, state: str, reason: str, queue_limit: float) -> None:
        """Cancel a job Slurm holds for a reason no wait cures, and raise LaunchError saying why
        and, for a job shaped beyond the partition, which nodes offer too little."""
        self.cancel()
        hint = ""
        if reason in ("PartitionConfig", "BadConstraints"):
            hint = self._launcher._shape_hint(self.spec)
        elif reason == "PartitionTimeLimit":
            hint = f"; the job asked for {self.spec.timeout_min} min"
        raise self._error(
            LaunchError,
            f"Slurm will not start it: {state}, reason {reason} ({_NEVER_STARTS[reason]}){hint}; cancelled "
            f"at once rather than waiting queue_timeout_s ({queue_limit:.0f} s). Check the profile against "
            "the partition (sinfo, scontrol show partition).",
            state,
        )

    def _check_pinned_nodes(self, state: str, reason: str) -> None:
        """A waiting job pinned to a node Slurm cannot use (down, not responding, drained) would
        only wait out ``queue_timeout_s``: cancel it now and name the node. A node that is only
        UNKNOWN has not registered with slurmctld since it (re)started (1 to 5 s on the test
        cluster): the job waits for it, bounded by ``queue_timeout_s``."""
        unusable = self._launcher._unusable_nodes(self.spec.nodelist)
        unusable = {n: why for n, why in unusable.items() if _words(why) != {"UNKNOWN"}}
        if unusable:
            self.cancel()
            names = ", ".join(f"{n} is {why}" for n, why in unusable.items())
            why = f" (Slurm's reason: {reason})" if reason else ""
            raise self._node_lost(
                f"cannot start while {state}{why}: {names}; cancelled at once rather than waiting queue_timeout_s.",
                state,
                unusable,
            )

    def _give_up(self, state: str, lost: dict[str, str], requeued: bool = False) -> None:
        """Cancel the job and raise NodeLostError naming the nodes and Slurm's view of them."""
        lost = lost or self._launcher._lost_nodes(self._launcher._job_nodes(self.job_id, self.spec.nodes))
        self.cancel()
        names = ", ".join(f"{n} is {why}" for n, why in lost.items())
        if requeued:
            what = f"was put back in the queue ({state}) after it had started" + (f": {names}" if names else "")
        else:
            what = f"lost its node(s) while {state}: {names}"
        raise self._node_lost(f"{what}; cancelled. Check slurmd there (scontrol show node).", state, lost)

    def _node_lost(self, message: str, state: str, lost: dict[str, str]) -> NodeLostError:
        self._launcher.learn_lost(lost, job_id=self.job_id, how=f"under job {self.job_id} ({self.spec.name}), {state}")
        self._launcher._status(self.job_id, "NODE_FAIL", "; ".join(f"{n} is {why}" for n, why in lost.items()))
        err = self._error(NodeLostError, message, state, lost=lost)
        assert isinstance(err, NodeLostError)
        return err

    def _a_task_failed_long_ago(self, now: float) -> bool:
        """True when a task failed over ``failed_task_grace_s`` ago and another one still runs."""
        tasks = self._tasks()
        if len(tasks) < 2:
            return False
        for index in sorted(self._written_results(len(tasks)) - self._checked_pickles):
            task = tasks[index]
            try:
                outcome, payload = submitit.core.utils.pickle_load(task.paths.result_pickle)
            except Exception:  # still being written; look again next round
                continue
            self._checked_pickles.add(index)
            if outcome == "error":
                self._failed_tasks[index] = _last_error_line(str(payload).strip().splitlines())
                self._first_failure = self._first_failure or now
        first = self._first_failure
        grace = self._launcher.failed_task_grace_s
        return first is not None and now - first > grace and len(self._checked_pickles) < len(tasks)

    def _written_results(self, count: int) -> set[int]:
        """The indices (below ``count``) of the tasks whose result file exists, from one listing of
        the job's folder rather than one look-up per task (512 of them at 64 × 8, on a shared
        filesystem, every _FAILED_SCAN_S)."""
        prefix, suffix = f"{self.job_id}_", "_result.pkl"
        found: set[int] = set()
        try:
            with os.scandir(self.folder) as entries:
                for entry in entries:
                    name = entry.name
                    if name.startswith(prefix) and name.endswith(suffix):
                        middle = name[len(prefix) : -len(suffix)]
                        if middle.isdigit() and int(middle) < count:
                            found.add(int(middle))
        except FileNotFoundError:
            pass
        return found

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
        # Results may lag the job's end on a shared filesystem: wait for them once, not per task,
        # and briefly for a job that was cancelled or killed (no task of it will write one now).
        lag = _RESULT_LAG_S if state in ("COMPLETED", "FINISHED", "GONE") else 3.0
        lag = lag if lag_s is None else lag_s
        deadline = time.monotonic() + lag
        while len(self._written_results(len(tasks))) < len(tasks) and time.monotonic() < deadline:
            time.sleep(0.5)
        if self._launcher.executor == "local":
            self._until_processes_end(_LOCAL_EXIT_LIMIT_S)
        out: list[TaskResult[R]] = []
        failed: list[tuple[int, str]] = []  # (task index, why)
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
            outcome, output = _read_result(Path(task.paths.result_pickle))
            if outcome != "success":
                failed.append((index, _last_error_line(str(output).strip().splitlines())))
                self._launcher.keep_watch(self.job_id, index, _left_watch(Path(task.paths.result_pickle)))
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
        # A task's result names its node; Slurm is asked only for the tasks that failed.
        nodes = self._launcher._job_nodes(self.job_id, self.spec.nodes) if failed else ()
        per_node = self.spec.tasks_per_node
        where = [nodes[i // per_node] if len(nodes) == self.spec.nodes else "?" for i, _ in failed]
        failures = [f"task {index} on {node}: {why}" for (index, why), node in zip(failed, where, strict=True)]
        spans = [(r.started, r.ended) for r in out if r.started and r.ended]
        self.process_started = min((r.process_started for r in out if r.process_started), default=0.0)
        self.start_up = start_up_summary(out)
        if spans and self.on_ran is not None:
            self.on_ran(min(a for a, _ in spans), max(b for _, b in spans))
        if failures:
            final = self._state(force=True) if self._launcher.executor == "slurm" else state
            message = f"ended {final} with {len(failures)} failed task(s): " + "; ".join(failures)
            missed = self._srun_missed_controller()
            if missed:
                # srun could not ask slurmctld for the job step: no task ran, on no node's account.
                fault = DaemonUnreachable.for_step(self.job_id, self.spec.name, missed)
                fault.fault_sentence = OUTAGES.sentence("slurmctld") or fault.fault_sentence
                raise fault
            lost = self._launcher._lost_nodes(nodes) if self._launcher.executor == "slurm" else {}
            unreached = self._unreached_nodes() if learn_lost and self._launcher.executor == "slurm" else {}
            if unreached:
                # srun cancels the tasks it did start when one node's launch fails: those are
                # not the culprits, the node it could not reach is.
                others = [f for f, node in zip(failures, where, strict=True) if node not in unreached]
                message = f"ended {final}: srun could not start its tasks on {', '.join(unreached)}" + (
                    f" and ended the other {len(others)}" if others else ""
                )
                lost = {**lost, **unreached}  # srun's reason says more than the node's state
            if not lost and learn_lost and self._launcher.executor == "slurm":
                lost = _silent_nodes(failed, where, {r.node for r in out}, self.job_id, final)
            if lost:
                message += "; " + ", ".join(f"{n} is {why}" for n, why in lost.items())
                err = self._node_lost(message, final, lost)
                answered = sorted(out, key=lambda r: r.rank)
                err.answered = list(answered)
                raise err
            raise self._error(LaunchError, message, final)
        return sorted(out, key=lambda r: r.rank)

    def _srun_missed_controller(self) -> str:
        """srun's line in the batch step's stderr when it could not reach slurmctld to start the
        job's step (a controller restarting as the job began), else empty."""
        if self._launcher.executor != "slurm":
            return ""
        tasks = self._tasks()
        return srun_missed_controller(_tail(Path(tasks[0].paths.stderr), lines=200)) if tasks else ""

    def _unreached_nodes(self) -> dict[str, str]:
        """Nodes srun could not start this job's tasks on, from the batch step's stderr."""
        tasks = self._tasks()
        if not tasks:
            return {}
        return launch_failures(_tail(Path(tasks[0].paths.stderr), lines=200))


def _silent_nodes(
    failed: list[tuple[int, str]], where: list[str], answered: set[str], job_id: str, state: str
) -> dict[str, str]:
    """Nodes every task of which wrote no result at all, in a job where another node's tasks did."""
    if not answered:
        return {}
    silent: dict[str, list[int]] = {}
    for (index, why), node in zip(failed, where, strict=True):
        if node != "?" and why.startswith("no result"):
            silent.setdefault(node, []).append(index)
    short = {h.split(".")[0] for h in answered}
    return {
        n: f"silent: no task of it wrote a result in job {job_id} ({state}) while other nodes' did"
        for n in silent
        if n.split(".")[0] not in short
    }


def _left_watch(result_pickle: Path) -> XidWatch | None:
    """The Xid watch a task whose workload raised left beside its result, if any."""
    try:
        watch = pickle.loads(xid_path(result_pickle).read_bytes())
    except (OSError, pickle.UnpicklingError, EOFError, AttributeError, ValueError):
        return None
    return watch if isinstance(watch, XidWatch) else None


def submitit_logs_to_stderr() -> None:
    """submitit logs to stdout (e.g. a warning each time sacct fails on a cluster without
    accounting); a script whose stdout is JSON lines moves those logs to stderr."""
    for handler in logging.getLogger("submitit").handlers:
        if isinstance(handler, logging.StreamHandler) and handler.stream is sys.stdout:
            handler.setStream(sys.stderr)


# submitit's warning each time sacct fails ("Call #12 - Bypassing sacct error ..."): on a cluster
# without accounting it comes with every state query, up to hundreds per test.
_SACCT_BYPASSED = "Bypassing sacct error"


class SacctBypassedFilter(logging.Filter):
    """Drops submitit's warning that sacct failed and is bypassed; every other record passes."""

    def filter(self, record: logging.LogRecord) -> bool:
        return _SACCT_BYPASSED not in record.getMessage()


@contextlib.contextmanager
def sacct_bypass_quiet() -> Iterator[None]:
    """While the block runs, submitit's logger drops its sacct-bypassed warnings."""
    logger = logging.getLogger("submitit")
    quiet = SacctBypassedFilter()
    logger.addFilter(quiet)
    try:
        yield
    finally:
        logger.removeFilter(quiet)


def _words(why: str) -> set[str]:
    """The state words of ``"DOWN+NOT_RESPONDING (reason)"``, without the reason."""
    return set(why.split(" (")[0].split("+"))


def _read_result(path: Path) -> tuple[str, Any]:
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


def _last_error_line(lines: list[str]) -> str:
    """The most telling line of a submitit error: the exception, not the banner."""
    for line in reversed(lines):
        stripped = line.strip()
        if stripped and not set(stripped) <= {"-"} and not stripped.startswith(("You can check", "or at paths", "- /")):
            return stripped
    return lines[0] if lines else "no output"


class SubmititLauncher(Launcher):
    """Submits workloads through submitit; tracks live jobs so they can all be cancelled (the
    submitit implementation of ``launch.Launcher``)."""

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
        poll_s: float = 0.25,
        on_status: StatusCallback | None = None,
        accounting: bool = True,
        visible_gpus: tuple[int, ...] | None = None,
        run_prefix: str = "",
    ) -> None:
        self.executor = executor
        # Local executor: the machine's GPUs a job's tasks may get (NVML indices), as the caller's
        # CUDA_VISIBLE_DEVICES exposed them; None: all, numbered from 0.
        self.visible_gpus = visible_gpus
        # False: the cluster runs without slurmdbd; jobs are followed through the queue, and
        # submitit's warnings that sacct failed say nothing (``sacct_quiet``).
        self.accounting = accounting
        # The names of this run's jobs start with it; a job waiting behind others tells the
        # run's own from other work by it (faults.other_work). Empty: no job is told apart.
        self.run_prefix = run_prefix
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
        self._ending: set[str] = set()  # results all read, the job not yet seen to leave the queue
        self._lock = threading.Lock()
        # The last shared squeue read (``_queue_entries``) and when it was taken (monotonic s).
        self._queue_lock = threading.Lock()
        self._queue_read: dict[str, tuple[str, str]] = {}
        self._queue_read_at = float("-inf")
        # submitit's job-state watcher is shared and not thread-safe: jobs started ahead (see
        # run/runner.py) are waited for from several threads.
        self.submitit_lock = threading.RLock()
        self._nodes_cache: dict[str, tuple[str, ...]] = {}
        self.failed_task_grace_s = _FAILED_TASK_GRACE_S
        # Nodes seen to fail under a job (name → Slurm's state and reason): not used again.
        self.lost_nodes: dict[str, str] = {}  # node → Slurm's state and reason, or what this run saw
        # node → how this run learned it lost the node: {"why", "when" (UTC), "job", "how"}; the first
        # evidence is kept, later sightings do not overwrite it.
        self.lost_seen: dict[str, dict[str, str]] = {}
        self._nodes_used: set[str] = set()  # every node a job of this run was pinned to
        self.xid_watches: dict[tuple[str, int], XidWatch] = {}

    def keep_watch(self, job_id: str, task: int, watch: XidWatch | None) -> None:
        """Keep a task's Xid watch for the run's Xid check (once per task, however often read)."""
        if watch is not None:
            self.xid_watches[(job_id, task)] = watch

    def learn_lost(self, lost: Mapping[str, str], *, job_id: str, how: str) -> None:
        """Remember nodes this run lost, once each: later jobs are planned without them and the
        checks they would have had fail with this first evidence."""
        when = _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")
        for node, why in lost.items():
            self.lost_nodes.setdefault(node, why)
            self.lost_seen.setdefault(node, {"why": why, "when": when, "job": job_id, "how": how})

    def submit(self, fn: Callable[..., R], spec: JobSpec, /, **kwargs: Any) -> SubmititJob[R]:
        """Start ``fn(ctx, **kwargs)`` on every task of ``spec``; returns at once. A job pinned to
        a node this run lost is refused without a submission, naming the first evidence, unless
        it asks for every tested node (``spec.all_nodes``): then it runs on the others."""
        gone = [n for n in spec.nodelist if n in self.lost_nodes]
        if gone and spec.all_nodes and len(gone) < len(spec.nodelist):
            kept = tuple(n for n in spec.nodelist if n not in self.lost_nodes)
            spec = dataclasses.replace(spec, nodelist=kept, nodes=len(kept))
            gone = []
        if gone:
            seen = "; ".join(
                f"{n}: {self.lost_nodes[n]} (seen {self.lost_seen.get(n, {}).get('how', 'earlier')})" for n in gone
            )
            raise NodeLostError(
                f"{spec.name}: not submitted: {seen}", lost={n: self.lost_nodes[n] for n in gone}, nodes=tuple(gone)
            )
        self._nodes_used.update(spec.nodelist)
        if self.executor == "local" and spec.nodes != 1:
            raise LaunchError(f"{spec.name}: the local executor runs on one node; {spec.nodes} were asked for.")
        folder = self.folder / f"{spec.name}-{uuid.uuid4().hex[:8]}"
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
            # submitit asks Slurm for a signal this long before the limit (90 s by default); a
            # quarter of a short job's limit keeps that signal from arriving almost at its start.
            params["slurm_signal_delay_s"] = min(90, max(10, spec.timeout_min * 60 // 4))
            params["slurm_setup"] = [TASK_SETUP]
        env = {**self.env, **(spec.env or {})}
        watch_xid = bool(spec.gpus_per_node or spec.gpus_per_task)

        def send() -> submitit.Job[TaskOutput[R]]:
            executor = submitit.AutoExecutor(folder=folder, cluster=self.executor)
            executor.update_parameters(**params)
            if self.executor == "local" and self.visible_gpus is not None:
                # The tasks' CUDA_VISIBLE_DEVICES are taken from these, not 0..gpus_per_node-1.
                # submitit's LocalExecutor takes visible_gpus; its AutoExecutor passes no such
                # parameter on.
                executor._executor.update_parameters(visible_gpus=self.visible_gpus)
            try:
                with self.submitit_lock:
                    return executor.submit(run_on_node, fn, env, kwargs, watch_xid)
            except Exception:
                shutil.rmtree(folder, ignore_errors=True)  # a try sent again starts afresh
                raise

        try:
            # sbatch is sent again while slurmctld cannot be reached, never after it may have
            # received the job (slurm_retry).
            job = send() if self.executor == "local" else OUTAGES.attempt("sbatch", send, resend=False)
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
            if self.executor == "slurm" and "node configuration is not available" in str(exc):
                why += self._shape_hint(spec)
            raise LaunchError(why) from exc
        handle = SubmititJob(job, spec, self)
        with self._lock:
            self._live[handle.job_id] = handle
        self._status(handle.job_id, "SUBMITTED", spec.name)
        return handle

    def _shape_hint(self, spec: JobSpec) -> str:
        """Why Slurm cannot place ``spec``: the nodes of the partition that offer too little."""
        gpus = spec.gpus_per_node or (spec.gpus_per_task or 0) * spec.tasks_per_node
        cpus = spec.tasks_per_node * (spec.cpus_per_task or 1)
        try:
            known = slurm.partition_nodes(self.partition)
        except Exception:  # only an explanation; the refusal itself is the error
            return ""
        short = [
            f"{n.name} offers {n.gpus} GPU(s) (Gres={n.gres or 'none'}) and {n.cpus} CPUs"
            for n in known
            if n.gpus < gpus or n.cpus < cpus
        ]
        where = f"partition {self.partition}" if self.partition else "the cluster"
        ask = f"; the job asked for {spec.nodes} node(s) with {gpus} GPU(s) and {cpus} CPU(s) each"
        if not known:
            return f"{ask}; {where} has no nodes"
        if not short:
            return f"{ask}; {len(known)} node(s) in {where} offer that, {spec.nodes} asked for"
        return f"{ask}; in {where}: " + ", ".join(short[:8]) + (f" and {len(short) - 8} more" if len(short) > 8 else "")

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

    def settle(self, limit_s: float = _SETTLE_S) -> list[str]:
        """At a run's normal end: wait (bounded) for the jobs whose results were all read to leave
        the queue by themselves, so Slurm records them COMPLETED rather than cancelled and their
        nodes are free for whatever runs next; returns the ids still listed at the limit (the
        caller cancels those)."""
        with self._lock:
            ending, self._ending = sorted(self._ending), set()
        deadline = time.monotonic() + limit_s
        while ending:
            try:
                listed = slurm.my_queue()  # one question per look, however many jobs
            except GpuClusterError:
                break  # the queue cannot say: the caller's cancel covers them
            ending = [job_id for job_id in ending if job_id in listed]
            if not ending or time.monotonic() >= deadline:
                break
            time.sleep(_SETTLE_POLL_S)
        return ending

    def sacct_quiet(self) -> contextlib.AbstractContextManager[None]:
        """Around submitit's state queries: on a cluster without accounting, its warning that sacct
        failed is dropped (the launcher reads the queue instead); with accounting it is kept."""
        return contextlib.nullcontext() if self.accounting else sacct_bypass_quiet()

    def _note_ending(self, job_id: str) -> None:
        with self._lock:
            self._ending.add(job_id)

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

    def _queue_entries(self) -> dict[str, tuple[str, str]]:
        """The queue's word on every job of this launcher still waited on, job id → (state,
        reason): one squeue for all of them, read at most every ``_QUICK_STATE_S``, however many
        jobs wait at once (64 per-node training jobs at 64 nodes)."""
        with self._queue_lock:
            now = time.monotonic()
            if now - self._queue_read_at >= _QUICK_STATE_S:
                with self._lock:
                    ids = list(self._live)
                self._queue_read = slurm.queue_entries(ids)
                self._queue_read_at = time.monotonic()
            return self._queue_read

    def queue_entries(self, job_ids: Sequence[str]) -> dict[str, tuple[str, str]]:
        """The shared read's word on these jobs of this launcher, job id → (state, reason): no
        squeue of its own while they are waited on."""
        entries = self._queue_entries()
        return {i: entries[i] for i in job_ids if i in entries}

    def _pending_reason(self, job_id: str) -> str:
        try:
            reason = self._queue_entries().get(job_id, ("", ""))[1]
        except Exception:  # a reason is a nicety; never let it mask the real error
            return ""
        return "" if reason in ("None", "(null)") else reason  # not evaluated by the scheduler yet

    def _queue_state(self, job_id: str) -> str | None:
        """The job's state as the queue sees it (works without accounting), None once Slurm no
        longer knows it; a job the shared read no longer lists is asked after on its own."""
        entry = self._queue_entries().get(job_id)
        return entry[0] if entry else slurm.queue_state(job_id)

    def _unusable_nodes(self, nodes: tuple[str, ...]) -> dict[str, str]:
        """Of ``nodes``, those Slurm will not start a job on (down, not responding, drained,
        unknown): name → state and reason. Empty when Slurm cannot be asked."""
        try:
            found = {n.name: n for n in slurm.nodes()}
        except Exception:  # cannot tell; queue_timeout_s still bounds the wait
            return {}
        out: dict[str, str] = {}
        for name in nodes:
            node = found.get(name)
            if node is None:
                out[name] = "not known to slurmctld"
            elif not node.usable:
                out[name] = node.state + (f" ({node.reason})" if node.reason else "")
        return out

    def _holders(self, nodes: tuple[str, ...], job_id: str) -> list[slurm.Holder]:
        """The other jobs on ``nodes`` (any user's); empty when Slurm cannot say."""
        if self.executor != "slurm":
            return []
        try:
            return [h for h in slurm.holders(nodes) if h.job_id != job_id]
        except Exception:  # a nicety for the message; the timeout itself stands
            return []

    def _what_holds(self, nodes: tuple[str, ...], job_id: str, holders: list[slurm.Holder] | None = None) -> str:
        """Why a job pinned to ``nodes`` may still wait, as one clause: other jobs on those nodes,
        and the nodes of this run's jobs that Slurm cannot use or this run lost (a job that failed
        to launch on a dead node keeps the live nodes of its allocation until Slurm has ended it):
        "node3 held by job 23 (x-sharedfs), RUNNING on node3, node4; node4 is DOWN+NOT_RESPONDING
        (earlier jobs of this run ran there; Slurm may still be ending one)". Empty when nothing is
        known or Slurm cannot be asked."""
        if self.executor != "slurm":
            return ""
        parts: list[str] = []
        if holders is None:
            holders = self._holders(nodes, job_id)
        for holder in holders:
            mine = ", ".join(n for n in nodes if n in holder.nodes)
            parts.append(f"{mine} held by {holder.describe()}")
        used = sorted(self._nodes_used | {n for h in holders for n in h[3]})
        bad = {**self._unusable_nodes(tuple(used)), **self.lost_nodes}
        bad = {n: why for n, why in bad.items() if n not in nodes}
        if bad:
            names = ", ".join(f"{n} is {why}" for n, why in sorted(bad.items()))
            parts.append(f"{names} (earlier jobs of this run ran there; Slurm may still be ending one)")
        return "; ".join(parts)

    def _nudge(self, job_id: str) -> None:
        try:
            slurm.nudge_scheduler(job_id)
        except Exception:  # a nudge only saves time; the queue bound still holds
            pass

    def _ending_on_lost(self, nodes: tuple[str, ...], job_id: str) -> str:
        """When every job holding ``nodes`` is one Slurm is still ending (COMPLETING) on a node
        this run lost, those jobs as one clause ("job 12 (x-probe) on node4"); else empty. A job
        whose launch failed on a dead node keeps its live nodes until slurmctld gives up on the
        dead one (about MessageTimeout), and a job waiting behind it waits for that, not for the
        node it asked for."""
        if self.executor != "slurm" or not self.lost_nodes:
            return ""
        try:
            holders = [h for h in slurm.holders(nodes) if h[0] != job_id]
        except Exception:  # cannot tell: the wait counts as any other
            return ""
        ending = [h for h in holders if h[2] == "COMPLETING" and any(n in self.lost_nodes for n in h[3])]
        if not ending or len(ending) != len(holders):
            return ""
        lost = sorted({n for h in ending for n in h[3] if n in self.lost_nodes})
        return ", ".join(f"job {h.job_id} ({h.name})" for h in ending) + f" on {', '.join(lost)}"

    def _lost_nodes(self, nodes: tuple[str, ...]) -> dict[str, str]:
        if not nodes:
            return {}
        try:
            return slurm.lost_nodes(slurm.nodes(), nodes)
        except Exception:  # cannot tell; the job's own state and time limit still bound the wait
            return {}

    def _job_nodes(self, job_id: str, expected: int | None = None) -> tuple[str, ...]:
        if self.executor == "local":
            return (socket.gethostname(),)
        if job_id not in self._nodes_cache:
            try:
                nodes = slurm.job_nodes(job_id, expected)
            except Exception:
                return ()
            # Neither may list the whole allocation yet while the job starts: keep only a full one.
            if nodes and (expected is None or len(nodes) == expected):
                self._nodes_cache[job_id] = nodes
            return nodes
        return self._nodes_cache[job_id]

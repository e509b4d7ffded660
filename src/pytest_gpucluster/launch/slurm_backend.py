"""The Slurm backend: ``SlurmLauncher`` submits through ``AutoExecutor(cluster="slurm")`` and
``SlurmJob`` follows each job through the launcher's shared ``SlurmWatcher``, ending its wait by
the rules of ``wait_rules``: a job Slurm will never start, a node lost under it, a controller
away past the retry window or its nodes held by other work.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Protocol, TypeVar

import submitit

from pytest_gpucluster import slurm
from pytest_gpucluster.errors import DaemonUnreachable, LaunchError
from pytest_gpucluster.launch import JobSpec, StatusCallback, TaskResult
from pytest_gpucluster.launch import task_files as files
from pytest_gpucluster.launch import wait_rules as rules
from pytest_gpucluster.launch.faults import foreign_work, held_sentence, other_work, srun_missed_controller
from pytest_gpucluster.launch.job import Owner, SubmititJob
from pytest_gpucluster.launch.lost import LostNodes
from pytest_gpucluster.launch.node import TaskOutput
from pytest_gpucluster.launch.submitit_backend import SubmititLauncher
from pytest_gpucluster.launch.watcher import SlurmWatcher
from pytest_gpucluster.slurm import Holder

R = TypeVar("R")


class SlurmOwner(Owner, Protocol):
    """What a Slurm job reads of its launcher besides what every job reads (``SlurmLauncher``)."""

    @property
    def watcher(self) -> SlurmWatcher: ...

    @property
    def run_prefix(self) -> str: ...

    def shape_hint(self, spec: JobSpec) -> str: ...


class SlurmJob(SubmititJob[R]):
    """A Slurm job with a bounded wait. It asks Slurm nothing itself: its launcher's watcher
    does, once for every job waited on."""

    _watcher: SlurmWatcher

    def __init__(self, job: submitit.Job[TaskOutput[R]], spec: JobSpec, launcher: SlurmOwner) -> None:
        super().__init__(job, spec, launcher)
        self._owner = launcher
        self._outages = launcher.watcher.client.outages  # the run's record of the daemons' outages
        self.pending_reason = ""  # Slurm's last reason the job waited in the queue
        self._own_checked_at = 0.0  # past queue_timeout_s: when the jobs holding its nodes were last asked for
        self._holders_seen: list[Holder] = []

    def _state(self, force: bool) -> str:
        return self._watcher.job_state(self._job, force)

    def _nodes(self) -> tuple[str, ...]:
        return self._watcher.job_nodes(self.job_id, self.spec.nodes)

    def _has_ended(self, state: str) -> bool:
        return rules.has_ended(state) or self._watcher.sacct_done(self._job)

    def _stop(self) -> None:
        slurm.cancel(self._watcher.client, self.job_id)  # tried again while slurmctld restarts (slurm_retry)

    def _holders(self) -> list[Holder]:
        """The other jobs on the nodes this job is pinned to; empty when Slurm cannot say."""
        try:
            return self._watcher.holders(self.spec.nodelist, besides=self.job_id)
        except Exception:  # a nicety for the message; the timeout itself stands
            return []

    def _wait(self) -> str:
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
            if state == "PENDING" and (force or state != last_state):
                # Kept fresh while it waits: at the timeout the controller may be too busy to answer.
                pending_reason = self._watcher.pending_reason(self.job_id) or pending_reason
                self.pending_reason = pending_reason
            self._seen(state, last_state, pending_reason)
            last_state = state
            if self._finished(state):
                self._ended(state)
                if not rules.has_ended(state):
                    self._watcher.note_ending(self.job_id)
                return state
            if rules.is_waiting(state) and started is None:
                never_since = rules.never_starts_since(pending_reason, never_since, now)
                if rules.never_starts_confirmed(never_since, now):
                    hint = self._owner.shape_hint(self.spec) if rules.needs_shape_hint(pending_reason) else ""
                    decision = rules.never_starts(state, pending_reason, queue_limit, self.spec.timeout_min, hint)
                    raise self._give_up(decision, state)
                check_every = rules.BEHIND_LOST_CHECK_S if was_behind and not nudged else rules.NODE_CHECK_S
                if self.spec.nodelist and now - last_node_check >= check_every:
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
            elif state in rules.REQUEUED:
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
                if now - last_node_check >= rules.NODE_CHECK_S:
                    last_node_check = now
                    lost = self._watcher.lost_among(self._nodes())
                    not_responding = rules.not_responding_since(lost, not_responding, now)
                    if rules.lost_while_running(lost, not_responding, now):
                        raise self._give_up(rules.nodes_lost(state, lost), state)
                if self._cancelled_for_failed_task(now):
                    return "CANCELLED"
            time.sleep(self._launcher.poll_s)

    def _behind_own_jobs(self, over_s: float, now: float) -> bool:
        """``rules.behind_own_run`` for this job, Slurm asked at most every few seconds."""
        if not self.spec.nodelist:
            return False
        if now - self._own_checked_at >= rules.NODE_CHECK_S:
            self._own_checked_at = now
            self._holders_seen = self._holders()
        return rules.behind_own_run(over_s, self.spec.timeout_min, self._holders_seen, self._owner.run_prefix)

    def _queue_timeout(self, state: str, pending_reason: str, queue_limit: float, excused: float) -> LaunchError:
        """Cancel a job still waiting past queue_timeout_s and build its error, naming what holds
        its nodes; other work that holds them makes it a fault outside the nodes."""
        reason = self._watcher.pending_reason(self.job_id) or pending_reason
        holders = self._holders()
        held = self._watcher.what_holds(self.spec.nodelist, holders)
        other = other_work(holders, self._owner.run_prefix)
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

    def never_started(self) -> str | None:
        """For a job that ended: Slurm's state and reason when it never ran (cancelled or given up
        in the queue, so no node was allocated to it), else None."""
        ran = self.seen_running or bool(self._nodes())  # it had nodes: it started, however briefly
        record = {} if ran else self._watcher.controller_job(self.job_id)
        last = self._final_state or self._watcher.last_queue_state(self.job_id)
        return rules.never_started(ran, record, last, self.pending_reason)

    def _final(self, state: str) -> str:
        return self._state(force=True)

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
        """A fault of the controller when srun could not reach it; else the nodes Slurm lists as
        lost, those srun could not start tasks on, and those whose tasks all stayed silent while
        others answered."""
        stderr = self._batch_stderr()
        missed = srun_missed_controller(stderr)
        if missed:
            # srun could not ask slurmctld for the job step: no task ran, on no node's account.
            fault = DaemonUnreachable.for_step(self.job_id, self.spec.name, missed)
            fault.fault_sentence = self._outages.sentence("slurmctld") or fault.fault_sentence
            raise fault
        lost = self._watcher.lost_among(nodes, max_age_s=0)
        unreached = files.launch_failures(stderr) if learn_lost else {}
        if unreached:
            # srun cancels the tasks it did start when one node's launch fails: those are
            # not the culprits, the node it could not reach is.
            others = [node for node in where if node not in unreached]
            message = f"ended {final}: srun could not start its tasks on {', '.join(unreached)}" + (
                f" and ended the other {len(others)}" if others else ""
            )
            lost = {**lost, **unreached}  # srun's reason says more than the node's state
        if not lost and learn_lost:
            tasks = self._tasks()
            logged = {i for i, t in enumerate(tasks) if Path(t.paths.stdout).exists() or Path(t.paths.stderr).exists()}
            wrote = {node for (i, _), node in zip(failed, where, strict=True) if i in logged}
            no_files = {node for node in where if node != "?" and node not in wrote}
            lost = rules.silent_nodes(failed, where, {r.node for r in out}, self.job_id, final, no_files)
        return lost, message

    def _batch_stderr(self) -> str:
        """The end of the batch step's stderr, where srun says what it could not do."""
        tasks = self._tasks()
        if not tasks:
            return ""
        return files.tail(Path(tasks[0].paths.stderr), lines=200)


# A line of every batch script, before srun starts the tasks. submitit's task entry imports
# numpy before anything else, and numpy's OpenBLAS starts a thread per core of the node in every
# task, which multiplies each task's start-up CPU several times over (docs/scale.md, "What a
# task's imports cost"). No workload here uses numpy's BLAS; a value the user exported is kept.
TASK_SETUP = "export OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-1}"


class SlurmLauncher(SubmititLauncher):
    """Submits to Slurm with sbatch through submitit; its jobs are ``SlurmJob``. Besides what
    every launcher offers, its jobs read ``run_prefix`` and ``shape_hint``."""

    cluster = "slurm"
    watcher: SlurmWatcher

    def __init__(
        self,
        *,
        folder: Path,
        partition: str | None = None,
        account: str | None = None,
        qos: str | None = None,
        reservation: str | None = None,
        constraint: str | None = None,
        reserved: frozenset[str] = frozenset(),
        sbatch_extra: Mapping[str, str] | None = None,
        env: Mapping[str, str] | None = None,
        queue_timeout_s: float = 300.0,
        mem_gb: int | None = None,
        poll_s: float = 0.25,
        on_status: StatusCallback | None = None,
        accounting: bool = True,
        run_prefix: str = "",
        lost: LostNodes | None = None,
        client: slurm.Slurm | None = None,
    ) -> None:
        # What Slurm says of this launcher's jobs and their nodes, read once for all of them.
        # accounting False: the cluster runs without slurmdbd; jobs are followed through the queue.
        # reserved: the nodes of the run's reservation, where MAINTENANCE takes its jobs.
        # lost: the run's record of the nodes it lost (a new one when the caller keeps none).
        # client: the run's client of Slurm, with its record of outages (likewise).
        watcher = SlurmWatcher(accounting=accounting, reserved=reserved, lost=lost, client=client)
        super().__init__(
            folder=folder, watcher=watcher, env=env, queue_timeout_s=queue_timeout_s, poll_s=poll_s, on_status=on_status
        )
        # The names of this run's jobs start with it; a job waiting behind others tells the
        # run's own from other work by it (faults.other_work). Empty: no job is told apart.
        self.run_prefix = run_prefix
        self.partition = partition
        self.account = account
        self.qos = qos
        self.reservation = reservation
        self.constraint = constraint
        self.sbatch_extra = dict(sbatch_extra or {})
        self.mem_gb = mem_gb

    @property
    def accounting(self) -> bool:
        """False: the cluster runs without slurmdbd (jobs are followed through the queue)."""
        return self.watcher.accounting

    def _parameters(self, spec: JobSpec) -> dict[str, Any]:
        params: dict[str, Any] = {}
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
        if self.qos:
            params["slurm_qos"] = self.qos
        if self.constraint:
            params["slurm_constraint"] = self.constraint
        if spec.nodelist:
            params["slurm_nodelist"] = ",".join(spec.nodelist)
        if spec.exclusive:
            params["slurm_exclusive"] = True
        extra = {**self.sbatch_extra, **({"reservation": self.reservation} if self.reservation else {})}
        if extra:
            params["slurm_additional_parameters"] = extra
        # submitit asks Slurm for a signal this long before the limit (90 s by default); a
        # quarter of a short job's limit keeps that signal from arriving almost at its start.
        params["slurm_signal_delay_s"] = min(90, max(10, spec.timeout_min * 60 // 4))
        params["slurm_setup"] = [TASK_SETUP]
        return params

    def _send(self, send: Callable[[], submitit.Job[Any]]) -> submitit.Job[Any]:
        # sbatch is sent again while slurmctld cannot be reached, never after it may have
        # received the job (slurm_retry).
        return self.watcher.client.outages.attempt("sbatch", send, resend=False)

    def _refusal_hint(self, spec: JobSpec, refusal: Exception) -> str:
        return self.shape_hint(spec) if "node configuration is not available" in str(refusal) else ""

    def _job_of(self, job: submitit.Job[TaskOutput[R]], spec: JobSpec) -> SlurmJob[R]:
        job.watcher = self.watcher.sacct  # submitit's own state queries read this launcher's too
        return SlurmJob(job, spec, self)

    def shape_hint(self, spec: JobSpec) -> str:
        """Why Slurm cannot place ``spec``: the nodes of the partition that offer too little."""
        gpus = spec.gpus_per_node or (spec.gpus_per_task or 0) * spec.tasks_per_node
        cpus = spec.tasks_per_node * (spec.cpus_per_task or 1)
        try:
            known = slurm.partition_nodes(self.watcher.client, self.partition)
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

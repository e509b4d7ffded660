"""The launcher over submitit: Slurm through ``AutoExecutor(cluster="slurm")``, this machine
through submitit's local executor. With ``job``, ``watcher``, ``task_files`` and ``node`` (what
runs in the job), the only modules that import submitit.

The launcher submits and cancels; each ``SubmititJob`` (``launch.job``) is a future whose bounded
wait reads Slurm through the launcher's one ``SlurmWatcher`` (``launch.watcher``), shared by all
its jobs, and ends by the rules of ``launch.wait_rules``.
"""

from __future__ import annotations

import dataclasses
import shutil
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Literal, TypeVar

import submitit

from pytest_gpucluster import slurm
from pytest_gpucluster.errors import DaemonUnreachable, LaunchError, NodeLostError, SharedFsFault
from pytest_gpucluster.launch import JobSpec, Launcher, StatusCallback, TaskResult
from pytest_gpucluster.launch import wait_rules as rules
from pytest_gpucluster.launch.job import SubmititJob
from pytest_gpucluster.launch.lost import LostNodes
from pytest_gpucluster.launch.node import TaskOutput, run_on_node
from pytest_gpucluster.launch.watcher import SETTLE_S, SlurmWatcher, submitit_logs_to_stderr
from pytest_gpucluster.workloads.xid import XidWatch

__all__ = ["TASK_SETUP", "SubmititJob", "SubmititLauncher", "submitit_logs_to_stderr"]

R = TypeVar("R")

# A line of every batch script, before srun starts the tasks. submitit's task entry imports
# numpy before anything else, and numpy's OpenBLAS starts a thread per core of the node in every
# task, which multiplies each task's start-up CPU several times over (docs/scale.md, "What a
# task's imports cost"). No workload here uses numpy's BLAS; a value the user exported is kept.
TASK_SETUP = "export OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-1}"


class SubmititLauncher(Launcher):
    """Submits workloads through submitit and cancels them (the submitit implementation of
    ``launch.Launcher``). Its jobs are followed by its ``watcher``; what they ask of the
    launcher itself is public: its settings, ``status``, ``keep_watch`` and ``shape_hint``."""

    def __init__(
        self,
        *,
        executor: Literal["slurm", "local"],
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
        visible_gpus: tuple[int, ...] | None = None,
        run_prefix: str = "",
        lost: LostNodes | None = None,
        client: slurm.Slurm | None = None,
    ) -> None:
        self.executor = executor
        # Local executor: the machine's GPUs a job's tasks may get (NVML indices), as the caller's
        # CUDA_VISIBLE_DEVICES exposed them; None: all, numbered from 0.
        self.visible_gpus = visible_gpus
        # The names of this run's jobs start with it; a job waiting behind others tells the
        # run's own from other work by it (faults.other_work). Empty: no job is told apart.
        self.run_prefix = run_prefix
        self.folder = folder
        self.partition = partition
        self.account = account
        self.qos = qos
        self.reservation = reservation
        self.constraint = constraint
        self.sbatch_extra = dict(sbatch_extra or {})
        self.env = dict(env or {})
        self.queue_timeout_s = queue_timeout_s
        self.mem_gb = mem_gb
        self.poll_s = poll_s
        self.on_status = on_status
        self.failed_task_grace_s = rules.FAILED_TASK_GRACE_S
        # What Slurm says of this launcher's jobs and their nodes, read once for all of them.
        # accounting False: the cluster runs without slurmdbd; jobs are followed through the queue.
        # reserved: the nodes of the run's reservation, where MAINTENANCE takes its jobs.
        # lost: the run's record of the nodes it lost (a new one when the caller keeps none).
        # client: the run's client of Slurm, with its record of outages (likewise).
        self.watcher = SlurmWatcher(accounting=accounting, reserved=reserved, lost=lost, client=client)
        self.xid_watches: dict[tuple[str, int], XidWatch] = {}

    @property
    def accounting(self) -> bool:
        """False: the cluster runs without slurmdbd (jobs are followed through the queue)."""
        return self.watcher.accounting

    def keep_watch(self, job_id: str, task: int, watch: XidWatch | None) -> None:
        """Keep a task's Xid watch for the run's Xid check (once per task, however often read)."""
        if watch is not None:
            self.xid_watches[(job_id, task)] = watch

    def status(self, job_id: str, state: str, reason: str) -> None:
        """Tell the caller's status callback that a job's state changed."""
        if self.on_status is not None:
            self.on_status(job_id, state, reason)

    def submit(self, fn: Callable[..., R], spec: JobSpec, /, **kwargs: Any) -> SubmititJob[R]:
        """Start ``fn(ctx, **kwargs)`` on every task of ``spec``; returns at once. A job pinned to
        a node this run lost is refused without a submission, naming the first evidence, unless
        it asks for every tested node (``spec.all_nodes``): then it runs on the others."""
        lost, seen_as = self.watcher.lost.nodes, self.watcher.lost.seen
        gone = [n for n in spec.nodelist if n in lost]
        if gone and spec.all_nodes and len(gone) < len(spec.nodelist):
            kept = tuple(n for n in spec.nodelist if n not in lost)
            spec = dataclasses.replace(spec, nodelist=kept, nodes=len(kept))
            gone = []
        if gone:
            seen = "; ".join(f"{n}: {lost[n]} (seen {seen_as.get(n, {}).get('how', 'earlier')})" for n in gone)
            raise NodeLostError(
                f"{spec.name}: not submitted: {seen}", lost={n: lost[n] for n in gone}, nodes=tuple(gone)
            )
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
                with self.watcher.submitit_lock:
                    return executor.submit(run_on_node, fn, env, kwargs, watch_xid)
            except Exception:
                shutil.rmtree(folder, ignore_errors=True)  # a try sent again starts afresh
                raise

        try:
            # sbatch is sent again while slurmctld cannot be reached, never after it may have
            # received the job (slurm_retry).
            job = (
                send()
                if self.executor == "local"
                else self.watcher.client.outages.attempt("sbatch", send, resend=False)
            )
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
                why += self.shape_hint(spec)
            raise LaunchError(why) from exc
        if self.executor == "slurm":
            job.watcher = self.watcher.sacct  # submitit's own state queries read this launcher's too
        handle = SubmititJob(job, spec, self)
        self.watcher.watch(handle, spec.nodelist)
        self.status(handle.job_id, "SUBMITTED", spec.name)
        return handle

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

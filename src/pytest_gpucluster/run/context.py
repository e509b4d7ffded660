"""The job-running side of a run: the launcher, the run's job folder, the job shapes of the
profile, values measured once and shared, jobs that must run together, and the fault outside the
nodes that stopped a job. What runs the declared jobs (``run.produce``) uses it; checks never do.
"""

from __future__ import annotations

import contextlib
import dataclasses
import secrets
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

from pytest_gpucluster import slurm
from pytest_gpucluster.config import Profile, ThresholdSet
from pytest_gpucluster.errors import DAEMON_NAMES, ClusterFault, GpuClusterError
from pytest_gpucluster.launch import Job, JobSpec, Launcher, TaskResult, together
from pytest_gpucluster.launch.faults import GROUP_MARK
from pytest_gpucluster.launch.local_backend import LocalLauncher
from pytest_gpucluster.launch.local_gpus import LocalGpus
from pytest_gpucluster.launch.slurm_backend import SlurmLauncher
from pytest_gpucluster.plan import Plan
from pytest_gpucluster.run.folders import RunFolders
from pytest_gpucluster.run.nodes import NodeSet
from pytest_gpucluster.run.progress import Progress
from pytest_gpucluster.run.runner import Runner
from pytest_gpucluster.workloads.distributed import BACKEND_ENV

R = TypeVar("R")


class JobContext:
    """Submits and waits for the run's jobs on the tested nodes.

    What the run has learned is handed to it, not asked of the session: ``nodes`` (the tested,
    excluded, held and lost nodes, and the run's client of Slurm with its record of outages),
    ``runner`` (values measured once, early starts, the test being run) and ``progress`` (the
    live lines and the run's log, which hears every job's state changes)."""

    def __init__(
        self,
        profile: Profile,
        *,
        run_id: str,
        gpus_per_node: int,
        gpu_model: str | None,
        thresholds: ThresholdSet,
        nodes: NodeSet,
        local_gpus: LocalGpus | None,
        runner: Runner,
        is_xdist_worker: bool = False,
        progress: Progress,
    ) -> None:
        self.profile = profile
        self.run_id = run_id
        self.gpus_per_node = gpus_per_node
        self.gpu_model = gpu_model
        self.thresholds = thresholds
        self.node_set = nodes
        self.local_gpus = local_gpus
        self.runner = runner
        self.is_xdist_worker = is_xdist_worker  # another process controls the run (pytest-xdist)
        self.started_epoch = time.time()  # when the run started: what a node logged before is older
        self.progress = progress
        # This user's folder on the shared filesystem and the run's job folder, made on first use.
        self.folders = RunFolders(profile, run_id=run_id, say=progress.status, record=runner.record)
        self._launcher: Launcher | None = None
        # The first fault outside the nodes that stopped a check (``launch/faults.py``): later checks
        # first look whether it still stands, and end at once with the same sentence if so.
        self.cluster_fault: ClusterFault | None = None
        self._group = threading.local()  # the mark of the group run_together submits on this thread
        self._job_entries: dict[str, dict[str, Any]] = {}  # job id → its record (``note_parts``)
        # The run's jobs (set when the run starts, from the requests of the selected, runnable
        # tests): which job rides in another, which start ahead. Empty until then.
        self.plan = Plan()
        # The run's client of Slurm (the node set's): its outages are said as they begin and end.
        self.slurm = nodes.client
        self.slurm.outages.on_change = self._on_outage

    # ------------------------------------------------------------------ the nodes

    @property
    def nodes(self) -> tuple[str, ...]:
        """The tested nodes (``NodeSet.nodes``)."""
        return self.node_set.nodes

    @property
    def live_nodes(self) -> tuple[str, ...]:
        """The tested nodes less those lost during the run."""
        return self.node_set.live

    def live_or_fault(self) -> tuple[str, ...]:
        """The live nodes; where none is left, what took them is raised: Slurm's node list that
        could not be read, other work holding them (not judged, naming it), or the lost nodes."""
        live = self.node_set.live
        if live:
            return live
        if self.node_set.fault is not None:
            raise self.node_set.fault
        held = self.node_set.held_fault(self.node_set.nodes)
        if held is not None:
            raise held
        lost = "; ".join(f"{n}: {why}" for n, why in self.node_set.lost.items())
        raise GpuClusterError(self.node_set.error or "no usable node to run on" + (f" (lost: {lost})" if lost else ""))

    def short_of_gpus(self, gpus: int) -> str:
        """The tested nodes Slurm says have fewer than ``gpus`` GPUs (``NodeSet.short_of_gpus``)."""
        return self.node_set.short_of_gpus(gpus)

    def say(self, line: str) -> None:
        """One live ``[gpucluster]`` line (``progress.Progress.say``)."""
        self.progress.say(line)

    # ------------------------------------------------------------------ the launcher

    @property
    def launched(self) -> Launcher | None:
        """The launcher, if any job was submitted (None before: no folder, no job)."""
        return self._launcher

    @property
    def launcher(self) -> Launcher:
        """The submitit launcher, built on first use (no folder or job before a test needs one)."""
        if self._launcher is None:
            env = {"PYTHONUNBUFFERED": "1", **self.profile.env}
            if self.local_gpus is not None:
                env.update(self.local_gpus.task_env())  # the node's GPUs, for its NVML readings
            # The profile's executor picks the backend once; every job of the run is of its kind.
            if self.profile.executor == "slurm":
                self._launcher = SlurmLauncher(
                    folder=self.job_root,
                    partition=self.profile.partition,
                    account=self.profile.account,
                    qos=self.profile.qos,
                    reservation=self.profile.reservation,
                    constraint=self.profile.constraint,
                    reserved=self.node_set.reserved,
                    sbatch_extra=self.profile.sbatch_extra,
                    env=env,
                    queue_timeout_s=self.profile.queue_timeout_s,
                    mem_gb=self.profile.mem_gb,
                    on_status=self.progress.job_status,
                    accounting=self.profile.accounting,
                    run_prefix=f"gpucluster-{self.run_id}-",
                    lost=self.node_set.lost_record,
                    client=self.slurm,
                )
            else:
                self._launcher = LocalLauncher(
                    folder=self.job_root,
                    env=env,
                    queue_timeout_s=self.profile.queue_timeout_s,
                    on_status=self.progress.job_status,
                    visible_gpus=self.local_gpus.indices if self.local_gpus and self.local_gpus.restricted else None,
                    lost=self.node_set.lost_record,
                )
        return self._launcher

    @property
    def area(self) -> Path:
        """This user's folder on the shared filesystem (``RunFolders.area``)."""
        return self.folders.area

    @property
    def shared_root(self) -> Path:
        """The profile's ``shared_fs`` as this login node resolves it (``RunFolders.shared_root``)."""
        return self.folders.shared_root

    @property
    def job_root(self) -> Path:
        """The run's job folder, made on first use (``RunFolders.job_root``)."""
        return self.folders.job_root

    # ------------------------------------------------------------------ job shapes

    def spec(
        self,
        name: str,
        *,
        all_nodes: bool = False,
        nodes: int | None = None,
        tasks_per_node: int = 1,
        gpus_per_node: int | None = None,
        gpus_per_task: int | None = None,
        timeout_min: int | None = None,
        exclusive: bool = False,
        nodelist: tuple[str, ...] | None = None,
        env: Mapping[str, str] | None = None,
    ) -> JobSpec:
        """A job shape within this profile. ``all_nodes`` pins the job to every tested node, so
        per-node results come from one allocation."""
        live = self.node_set.live
        if all_nodes:
            nodelist = self.live_or_fault()
        count = len(nodelist) if nodelist else (nodes or 1)
        if not self.profile.gpus_are_real:
            # The profile says its GPUs are not real (GRES only): workloads take the CPU stand-in
            # path even on a host that has GPUs, as they would on the nodes the profile describes.
            env = {BACKEND_ENV: "gloo", **(env or {})}
        if not nodelist and self.profile.executor == "slurm" and len(live) >= count:
            nodelist = live[:count]  # stay on the tested nodes; drained and lost ones excluded
        elif not nodelist and self.profile.executor == "slurm" and self.node_set.held:
            # Too few tested nodes are free of other work: the check is not judged, naming the
            # holder, rather than run on nodes the run does not test.
            held = self.node_set.held_fault(self.node_set.nodes)
            assert held is not None
            raise held
        return JobSpec(
            name=f"{self.run_id}-{name}",
            nodes=count,
            tasks_per_node=tasks_per_node,
            gpus_per_node=self.gpus_per_node if gpus_per_node is None else gpus_per_node,
            gpus_per_task=gpus_per_task,
            nodelist=tuple(nodelist or ()) if self.profile.executor == "slurm" else (),
            timeout_min=timeout_min or self.profile.job_timeout_min,
            exclusive=exclusive,
            cpus_per_task=self.profile.cpus_per_task,
            all_nodes=all_nodes,
            env=env,
        )

    # ------------------------------------------------------------------ submitting

    def submit(self, fn: Callable[..., R], spec: JobSpec, /, **kwargs: Any) -> Job[R]:
        """Submit without waiting; the job id is recorded on the running test. Outside a light
        measurement (``once(..., light=True)``), first wait for the jobs started ahead to end."""
        if not self.runner.light:
            self.await_ahead()
        self._fault_still_stands()
        mark = getattr(self._group, "mark", "")
        if mark:  # a member of jobs that must run at the same time (run_together)
            spec = dataclasses.replace(spec, name=f"{spec.name}{GROUP_MARK}{mark}")
        try:
            job = self.launcher.submit(fn, spec, **kwargs)
        except ClusterFault as exc:
            self.note_fault(exc)
            raise
        entry: dict[str, Any] = {
            "kind": "job",
            "job_id": job.job_id,
            "name": spec.name,
            "folder": str(job.folder),
            "submitted_at": round(job.submitted_epoch, 3),
        }
        self.runner.record(entry)
        self._job_entries[job.job_id] = entry

        def ran(start: float, end: float) -> None:
            # The same dict sits in the test's user_properties: the results file sees the update.
            entry.update(ran_from=round(start, 3), ran_to=round(end, 3), workload_s=round(end - start, 3))
            entry.setdefault("seen_at", round(time.time(), 3))
            if job.process_started:
                entry["process_from"] = round(job.process_started, 3)
            if job.start_up:
                entry["start_up"] = dict(job.start_up)

        job.on_ran = ran
        return job

    def run(self, fn: Callable[..., R], spec: JobSpec, /, **kwargs: Any) -> list[TaskResult[R]]:
        """Submit, wait (bounded) and return one result per task."""
        return self.submit(fn, spec, **kwargs).results()

    def once(self, key: Any, produce: Callable[[], R], *, light: bool = False) -> R:
        """Measure once per run, judge many times: per-node tests of one area share one job
        (``run.Runner.once``). A failure is kept too: the first test to read it shows it in full,
        every later one in a line naming that test. ``light``: the jobs it submits measure no
        speed and may run beside the jobs started ahead; any other submission waits until those
        have ended."""
        return self.runner.once(key, produce, light=light)

    @staticmethod
    def results_together(*jobs: Job[Any]) -> list[list[TaskResult[Any]]]:
        """The results of jobs that run at once and wait for each other (``launch.together``)."""
        return together.results_together(*jobs)

    def run_together(self, submit: Callable[[], list[Job[Any]]]) -> list[list[TaskResult[Any]]]:
        """Jobs that must run at the same time: ``submit`` submits every one of them; waited on
        together, and on Slurm given back to the queue (submitted again through ``submit``) when
        a job that came after them holds what the ones still waiting need (``launch.together``)."""
        if self.profile.executor != "slurm":
            return together.results_together(*submit())

        def marked() -> list[Job[Any]]:
            # Each try's jobs carry a fresh mark of their group in their names (faults.group_of).
            self._group.mark = secrets.token_hex(3)
            try:
                return submit()
            finally:
                self._group.mark = ""

        watcher = self.launcher.watcher if isinstance(self.launcher, SlurmLauncher) else None
        return together.run_together(marked, say=self.progress.say, watcher=watcher)

    def note_parts(self, job_id: str, parts: Mapping[str, tuple[float, float]]) -> None:
        """For a job that serves several areas: when each area's part of the workload ran
        (epoch seconds, first task's start to last task's end), so the run's timing gives each
        area its part and not the whole job."""
        entry = self._job_entries.get(job_id)
        if entry is not None:
            entry["parts"] = {area: [round(a, 3), round(b, 3)] for area, (a, b) in parts.items()}

    # ------------------------------------------------------------------ early starts

    def await_ahead(self) -> None:
        """Wait (bounded) until every early start has ended."""
        still = self.runner.await_ahead()
        if still:
            limit = ahead_limit_s(self.profile)
            self.progress.status(f"early jobs still running after {limit:.0f} s: {', '.join(still)}; going on")

    # ------------------------------------------------------------------ faults outside the nodes

    def _on_outage(self, daemon: str, failure: str) -> None:
        """A live line when a Slurm daemon stops answering (its commands are tried again for
        ``slurm_retry_s``) and when it answers again."""
        name = DAEMON_NAMES.get(daemon, daemon)
        if failure:
            line = f"{name} does not answer ({failure.splitlines()[0]}); Slurm commands are tried again for up to "
            line += f"{self.slurm.outages.window_s:.0f} s"
        else:
            line = f"{name} answers again"
        self.progress.status(line)

    def note_fault(self, exc: ClusterFault) -> None:
        """Remember the first fault outside the nodes that stopped a job; other work that held
        nodes past queue_timeout_s is learned for those nodes alone (``NodeSet.hold``): no later
        job waits on them again."""
        held = getattr(exc, "held", None)
        if exc.what == "queue":
            if held:
                self.node_set.hold(held, exc.sentence)
            return
        if self.cluster_fault is None:
            self.cluster_fault = exc

    def _fault_still_stands(self) -> None:
        """Raise the remembered fault again when a quick look says it still stands (one try of
        ``scontrol ping`` or ``sacct``, a directory made on the shared filesystem): the checks
        after it end at once with the same sentence instead of each waiting out the retry window.
        A fault that has cleared is forgotten."""
        fault = self.cluster_fault
        if fault is None:
            return
        if fault.what == "shared_fs":
            if not self.folders.writable_now():
                raise fault
        elif not self.slurm.answers(fault.what):
            raise fault
        self.cluster_fault = None

    # ------------------------------------------------------------------ the end

    def cancel_everything(self, *, by_name: bool) -> list[str]:
        """Cancel the jobs this process submitted and, with ``by_name`` on Slurm, any job still
        queued under this run's name (covers jobs of xdist workers that died before they could
        cancel)."""
        cancelled = self._launcher.cancel_all() if self._launcher is not None else []
        if self.profile.executor == "slurm" and by_name:
            with contextlib.suppress(GpuClusterError):
                cancelled += slurm.cancel_by_name_prefix(self.slurm, f"gpucluster-{self.run_id}-")
        return cancelled


def ahead_limit_s(profile: Profile) -> float:
    """Longest a light job may take from submission to its end: queue wait, run time, grace."""
    return profile.queue_timeout_s + profile.job_timeout_min * 60 + 120.0

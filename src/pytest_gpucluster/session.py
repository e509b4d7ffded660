"""The one stateful object of a run: profile, thresholds, launcher, node list, results.

Built once in ``pytest_configure`` and registered as a plugin, so its hook methods see every
phase: collection (node parametrisation, skips for unmet needs), each test's reports (results
file, written by the controlling process only) and the end or interruption of the run (every
job still queued is cancelled).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import importlib.metadata
import inspect
import os
import platform
import secrets
import shutil
import signal
import socket
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Generator, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest

from pytest_gpucluster import slurm, slurm_retry
from pytest_gpucluster.config import Config, Profile, ThresholdSet
from pytest_gpucluster.drain import drain_rejected
from pytest_gpucluster.errors import (
    DAEMON_NAMES,
    ClusterFault,
    ConfigError,
    GpuClusterError,
    MissingThresholdError,
    SharedFsFault,
    SlurmQueryError,
)
from pytest_gpucluster.faults import GROUP_MARK, cluster_fault
from pytest_gpucluster.finish import finish
from pytest_gpucluster.launch import Job, JobSpec, Launcher, TaskResult, together
from pytest_gpucluster.launch.local_gpus import exposed_count_error, local_gpus
from pytest_gpucluster.launch.submitit_backend import SubmititLauncher
from pytest_gpucluster.options import Outputs
from pytest_gpucluster.outcomes import COULD_NOT_JUDGE, NOT_APPLICABLE
from pytest_gpucluster.plan import Facts, JobRequest, Plan, Use, last_order, make_plan
from pytest_gpucluster.plan import facts as run_facts
from pytest_gpucluster.results import PROPERTY, ResultsDocument
from pytest_gpucluster.run import Runner, Start
from pytest_gpucluster.run.runner import SharedFailure
from pytest_gpucluster.selection import (
    NEED_MARKERS,
    Needs,
    Selection,
    Shape,
    cannot_run,
    not_applicable,
    plan_selection,
)
from pytest_gpucluster.verdict import hostlist
from pytest_gpucluster.workloads.distributed import BACKEND_ENV

R = TypeVar("R")
# The module-level function by which a test file declares its checks not applicable to a shape.
DECLARED_NOT_APPLICABLE = "gpucluster_not_applicable"
_QUIET_WAIT_S = 20.0  # a job that started within this many seconds of queueing gets no second line


@dataclass(frozen=True)
class Settings:
    """Resolved options: what the session needs, without a pytest.Config."""

    config: Config
    profile: Profile
    results_path: Path | None
    run_id: str
    is_controller: bool
    is_xdist_worker: bool = False
    nodes: tuple[str, ...] = ()  # --nodes: test only these (a re-test); empty: the profile's choice
    outputs: Outputs = dataclasses.field(default_factory=Outputs)  # what the run writes and does at its end


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


class GpuClusterSession:
    """Profile + thresholds + launcher + node list + results, for one pytest run."""

    def __init__(self, settings: Settings, *, env: Mapping[str, str] | None = None) -> None:
        self.settings = settings
        self.profile = settings.profile
        self.config = settings.config
        env = os.environ if env is None else env
        if self.profile.slurm_conf:
            # submitit's sbatch/sacct/scancel inherit this process's environment.
            os.environ["SLURM_CONF"] = self.profile.slurm_conf
        model = self.profile.gpu_model
        # The local executor's node: this machine's GPUs, or those the caller's CUDA_VISIBLE_DEVICES exposes.
        self.local_gpus = local_gpus(env) if self.profile.executor == "local" else None
        if self.profile.gpus_per_node is None:
            exposed = self.local_gpus or local_gpus(env)
            self.gpus_per_node, model = len(exposed.indices), exposed.model
        else:
            self.gpus_per_node = self.profile.gpus_per_node
            given = self.local_gpus
            if given is not None and given.restricted and len(given.indices) < self.gpus_per_node:
                raise exposed_count_error(self.profile.name, self.gpus_per_node, given)
        if not self.gpus_per_node or not self.profile.gpus_are_real:
            model = model or "cpu"  # a node without GPU devices is judged by the "cpu" set
        self.gpu_model = model
        self.thresholds: ThresholdSet = self.config.thresholds_for(self.profile, gpu_model=model)
        self._job_root: Path | None = None
        self._owns_job_root = False
        self._launcher: Launcher | None = None
        self._nodes: tuple[str, ...] | None = None
        self.excluded_nodes: dict[str, str] = {}
        self.node_info: dict[str, slurm.NodeInfo] = {}  # Slurm's word on the partition's nodes at the start
        self._partition: list[slurm.NodeInfo] | None = None  # the partition's nodes, once asked
        if settings.nodes and self.profile.executor == "slurm" and settings.is_controller:
            self._check_named_nodes()
        self._lost_recorded: dict[str, str] = {}
        self.node_error: str | None = None
        self.node_fault: ClusterFault | None = None  # the node list could not be read: a fault outside the nodes
        # The first fault outside the nodes that stopped a check (``faults.py``): later checks
        # first look whether it still stands, and end at once with the same sentence if so.
        self.cluster_fault: ClusterFault | None = None
        self._group = threading.local()  # the mark of the group run_together submits on this thread
        slurm_retry.OUTAGES.window_s = float(self.profile.slurm_retry_s)
        slurm_retry.OUTAGES.on_change = self._on_outage
        self.runner = Runner(limit_s=self._ahead_limit_s(), record_to_test=self._record_to_test)
        self._collected: list[Needs] = []  # every collected check's needs, before deselection
        self.selection: Selection | None = None
        # The run's jobs (set when the run starts, from the requests of the selected, runnable
        # tests): which job rides in another, which start ahead. Empty until then.
        self.plan = Plan()
        self._job_entries: dict[str, dict[str, Any]] = {}  # job id → its record (``note_parts``)
        self.current_item: pytest.Item | None = None
        self.status_lines: list[str] = []
        self._pending_since: dict[str, float] = {}
        self.terminal: Any = None
        self._capture: Any = None  # pytest's capture manager: live lines go past the test's capture
        self._say_lock = threading.Lock()
        self.results: ResultsDocument | None = None
        if settings.is_controller:
            self.results = ResultsDocument(
                profile=self.profile.name,
                thresholds_file=str(self.config.path),
                thresholds_sha256=hashlib.sha256(self.config.path.read_bytes()).hexdigest(),
                environment=self._environment(env),
            )

    # ------------------------------------------------------------------ facts

    def _environment(self, env: Mapping[str, str]) -> dict[str, Any]:
        facts: dict[str, Any] = {
            "plugin": _version("pytest-gpucluster"),
            "python": platform.python_version(),
            "pytest": _version("pytest"),
            "submitit": _version("submitit"),
            "torch": _version("torch"),
            "login_node": socket.gethostname(),
            "executor": self.profile.executor,
            "thresholds_set": self.thresholds.name,
        }
        if self.local_gpus is not None and self.local_gpus.restricted:
            facts["cuda_visible_devices"] = self.local_gpus.describe()
        if self.profile.executor == "slurm":
            with contextlib.suppress(GpuClusterError):
                facts["slurm"] = slurm.version()
        return facts

    @property
    def nodes(self) -> tuple[str, ...]:
        """The nodes this run tests: the profile's nodelist, or the first usable nodes of its
        partition (drained and down ones are excluded and remembered with Slurm's reason)."""
        if self._nodes is None:
            self._nodes = self._resolve_nodes()
            if self.results is not None:
                self.results.nodes = list(self._nodes)
        return self._nodes

    def _check_named_nodes(self) -> None:
        """``--nodes`` names nodes of the profile's partition: asked of Slurm once, before any job
        (the answer is kept for the node list); ConfigError naming those it does not hold. Where
        Slurm cannot answer now, the run's node list says so later."""
        p = self.profile
        try:
            self._partition = slurm.partition_nodes(p.partition)
        except SlurmQueryError:
            return
        held = {n.name for n in self._partition}
        strangers = [n for n in self.settings.nodes if n not in held]
        if strangers:
            where = f"partition {p.partition!r}" if p.partition else "the cluster"
            raise ConfigError(
                f"--nodes: {hostlist(strangers)} {'is' if len(strangers) == 1 else 'are'} not in {where} of "
                f"profile {p.name!r} (its nodes: {hostlist(sorted(held)) or 'none'}); name nodes of that partition."
            )

    def _resolve_nodes(self) -> tuple[str, ...]:
        p = self.profile
        if p.executor == "local":
            return (socket.gethostname(),)
        try:
            known = self._partition if self._partition is not None else slurm.partition_nodes(p.partition)
        except SlurmQueryError as exc:
            self.node_error = str(exc)
            self.node_fault = cluster_fault(exc)
            return tuple(p.nodelist)  # the jobs will say what is wrong with them
        self.node_info = {n.name: n for n in known}
        named = self.settings.nodes or p.nodelist
        if named:
            # The operator named these nodes; one Slurm will not run jobs on is still left out (a
            # job pinned to it would only queue until queue_timeout_s), and said why.
            by_name = {n.name: n for n in known}
            for name in named:
                n = by_name.get(name)
                if n is None and self.settings.nodes:
                    self.excluded_nodes[name] = f"not in partition {p.partition!r} (--nodes)"
                elif n is not None and not n.usable:
                    self.excluded_nodes[name] = f"{n.state}" + (f" ({n.reason})" if n.reason else "")
            return tuple(name for name in named if name not in self.excluded_nodes)
        usable = [n.name for n in known if n.usable]
        for n in known:
            if not n.usable:
                self.excluded_nodes[n.name] = f"{n.state}" + (f" ({n.reason})" if n.reason else "")
        if not known:
            self.node_error = f"partition {p.partition!r} has no nodes (sinfo -p {p.partition})"
        return tuple(usable[: p.nodes])

    @property
    def lost_nodes(self) -> dict[str, str]:
        """Nodes that failed under a job of this run (name → Slurm's state and reason)."""
        return dict(self._launcher.lost_nodes) if self._launcher is not None else {}

    @property
    def live_nodes(self) -> tuple[str, ...]:
        """The tested nodes less those lost during the run: what later jobs run on."""
        lost = self.lost_nodes
        return tuple(n for n in self.nodes if n not in lost)

    # ------------------------------------------------------------------ launching

    @property
    def job_root(self) -> Path:
        """Folder for this run's job pickles and logs: on the shared filesystem for Slurm (nodes
        must read it), a private temporary folder for the local executor."""
        if self._job_root is None:
            if self.profile.executor == "slurm":
                shared = Path(self.profile.shared_fs or Path.home())
                if not shared.is_dir():
                    raise SharedFsFault(
                        f"shared_fs {str(shared)!r} of profile {self.profile.name!r} is not a directory on this "
                        "login node; mount the shared filesystem or fix shared_fs (jobs keep their files there)."
                    )
                root = shared / ".pytest-gpucluster" / "jobs" / self.settings.run_id / uuid.uuid4().hex[:6]
                try:
                    root.mkdir(parents=True, exist_ok=True)
                except OSError as exc:
                    raise SharedFsFault.cannot_write(
                        str(shared),
                        str(exc.strerror or exc),
                        f"cannot create the job folder {root}; jobs keep their files there, so it must be "
                        "writable and not full.",
                    ) from None
                self._job_root = root
            else:
                _remove_orphaned_job_roots(Path(tempfile.gettempdir()))
                self._job_root = Path(tempfile.mkdtemp(prefix=f"{LOCAL_JOB_ROOT_PREFIX}{os.getpid()}-"))
                self._owns_job_root = True
        return self._job_root

    @property
    def launcher(self) -> Launcher:
        """The submitit launcher, built on first use (no folder or job before a test needs one)."""
        if self._launcher is None:
            env = {"PYTHONUNBUFFERED": "1", **self.profile.env}
            if self.local_gpus is not None:
                env.update(self.local_gpus.task_env())  # the node's GPUs, for its NVML readings
            self._launcher = SubmititLauncher(
                executor=self.profile.executor,
                folder=self.job_root,
                partition=self.profile.partition,
                account=self.profile.account,
                sbatch_extra=self.profile.sbatch_extra,
                env=env,
                queue_timeout_s=self.profile.queue_timeout_s,
                mem_gb=self.profile.mem_gb,
                on_status=self._on_status,
                accounting=self.profile.accounting,
                visible_gpus=self.local_gpus.indices if self.local_gpus and self.local_gpus.restricted else None,
                run_prefix=f"gpucluster-{self.settings.run_id}-",
            )
        return self._launcher

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
        if all_nodes:
            nodelist = self.live_nodes
            if not nodelist:
                if self.node_fault is not None:
                    raise self.node_fault
                lost = "; ".join(f"{n}: {why}" for n, why in self.lost_nodes.items())
                raise GpuClusterError(
                    self.node_error or "no usable node to run on" + (f" (lost: {lost})" if lost else "")
                )
        count = len(nodelist) if nodelist else (nodes or 1)
        if not self.profile.gpus_are_real:
            # The profile says its GPUs are not real (GRES only): workloads take the CPU stand-in
            # path even on a host that has GPUs, as they would on the nodes the profile describes.
            env = {BACKEND_ENV: "gloo", **(env or {})}
        if not nodelist and self.profile.executor == "slurm" and len(self.live_nodes) >= count:
            nodelist = self.live_nodes[:count]  # stay on the tested nodes; drained and lost ones excluded
        return JobSpec(
            name=f"{self.settings.run_id}-{name}",
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

    def submit(self, fn: Callable[..., R], spec: JobSpec, /, **kwargs: Any) -> Job[R]:
        """Submit without waiting; the job id is recorded on the running test. Outside a light
        measurement (``once(..., light=True)``), first wait for the jobs started ahead to end."""
        if not self.runner.light:
            self._await_ahead()
        self._fault_still_stands()
        mark = getattr(self._group, "mark", "")
        if mark:  # a member of jobs that must run at the same time (run_together)
            spec = dataclasses.replace(spec, name=f"{spec.name}{GROUP_MARK}{mark}")
        try:
            job = self.launcher.submit(fn, spec, **kwargs)
        except ClusterFault as exc:
            self._note_fault(exc)
            raise
        entry: dict[str, Any] = {
            "kind": "job",
            "job_id": job.job_id,
            "name": spec.name,
            "folder": str(job.folder),
            "submitted_at": round(job.submitted_epoch, 3),
        }
        self.record(entry)
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

    def _on_outage(self, daemon: str, failure: str) -> None:
        """A live line when a Slurm daemon stops answering (its commands are tried again for
        ``slurm_retry_s``) and when it answers again."""
        name = DAEMON_NAMES.get(daemon, daemon)
        if failure:
            line = f"{name} does not answer ({failure.splitlines()[0]}); Slurm commands are tried again for up to "
            line += f"{slurm_retry.OUTAGES.window_s:.0f} s"
        else:
            line = f"{name} answers again"
        self.status_lines.append(line)
        self.say(line)

    def _note_fault(self, exc: ClusterFault) -> None:
        """Remember the first fault outside the nodes that stopped a job (not a queue wait: other
        work ends, and each job's wait is its own)."""
        if self.cluster_fault is None and exc.what != "queue":
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
            root = Path(self.profile.shared_fs or Path.home())
            try:
                Path(tempfile.mkdtemp(prefix=".pytest-gpucluster-probe-", dir=root)).rmdir()
            except OSError:
                raise fault from None
        elif not slurm.answers(fault.what):
            raise fault
        self.cluster_fault = None

    def short_of_gpus(self, gpus: int) -> str:
        """The tested nodes Slurm says have fewer than ``gpus`` GPUs, as one clause ("node1,
        node2 advertise 4 (Gres=gpu:4)"); empty when none or when Slurm was not asked."""
        short = [n for n in self.live_nodes if n in self.node_info and self.node_info[n].gpus < gpus]
        if not short:
            return ""
        shapes = sorted({f"{self.node_info[n].gpus} (Gres={self.node_info[n].gres or 'none'})" for n in short})
        return f"{', '.join(short)} advertise{'s' if len(short) == 1 else ''} {' or '.join(shapes)}"

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

        launcher = self.launcher
        states = launcher.queue_entries if isinstance(launcher, SubmititLauncher) else slurm.queue_entries
        return together.run_together(marked, say=self.say, states=states)

    def note_parts(self, job_id: str, parts: Mapping[str, tuple[float, float]]) -> None:
        """For a job that serves several areas: when each area's part of the workload ran
        (epoch seconds, first task's start to last task's end), so the run's timing gives each
        area its part and not the whole job."""
        entry = self._job_entries.get(job_id)
        if entry is not None:
            entry["parts"] = {area: [round(a, 3), round(b, 3)] for area, (a, b) in parts.items()}

    def run(self, fn: Callable[..., R], spec: JobSpec, /, **kwargs: Any) -> list[TaskResult[R]]:
        """Submit, wait (bounded) and return one result per task."""
        return self.submit(fn, spec, **kwargs).results()

    def once(self, key: Any, produce: Callable[[], R], *, light: bool = False) -> R:
        """Measure once per run, judge many times: per-node tests of one area share one job
        (``run.Runner.once``). A failure is kept too: the first test to read it shows it in full,
        every later one in a line naming that test. ``light``: the jobs it submits measure no
        speed and may run beside the jobs started ahead; any other submission waits until those
        have ended."""
        reader = self.current_item.nodeid if self.current_item is not None else None
        return self.runner.once(key, produce, light=light, reader=reader, present=lambda: list(self._jobs_of_current()))

    # ------------------------------------------------------------------ the plan

    def _ahead_limit_s(self) -> float:
        """Longest a light job may take from submission to its end: queue wait, run time, grace."""
        return self.profile.queue_timeout_s + self.profile.job_timeout_min * 60 + 120.0

    def make_plan(self, items: list[pytest.Item]) -> tuple[Plan, list[Start]]:
        """The plan for the runnable ``items`` (``plan.make_plan``) from the requests their
        ``uses`` markers declare, and for each request the first early start declared for it."""
        uses: list[Use] = []
        starts: dict[str, Callable[..., Any]] = {}
        for item in items:
            params = dict(getattr(getattr(item, "callspec", None), "params", {}))
            for mark in item.iter_markers("uses"):
                start = mark.kwargs.get("start")
                for request in mark.args:
                    if not isinstance(request, JobRequest):
                        raise GpuClusterError(
                            f"{item.nodeid}: @pytest.mark.uses takes JobRequest objects "
                            f"(pytest_gpucluster.plan.jobs), not {request!r}"
                        )
                    taken = _start_params(start, params) if start is not None else ()
                    uses.append(Use(request, item.nodeid, taken))
                    if start is not None:
                        starts.setdefault(request.key, start)
        known = Facts(
            gpus_per_node=self.gpus_per_node,
            flags=run_facts.flags(self.profile, self.gpus_per_node),
            sees_whole_selection=not self.settings.is_xdist_worker,
        )
        plan = make_plan(uses, known)
        early = [
            Start(job.key, starts[job.key], dict(p))
            for job in plan.ahead
            if job.key in starts
            for p in job.params or ((),)
            if len(p) == len(_start_args(starts[job.key]))
        ]
        return plan, early

    def _await_ahead(self) -> None:
        """Wait (bounded) until every early start has ended."""
        still = self.runner.await_ahead()
        if still:
            line = f"early jobs still running after {self._ahead_limit_s():.0f} s: {', '.join(still)}; going on"
            self.status_lines.append(line)
            self.say(line)

    def _jobs_of_current(self) -> Iterator[dict[str, Any]]:
        if self.current_item is None:
            return iter(())
        return (
            v
            for k, v in self.current_item.user_properties
            if k == PROPERTY and isinstance(v, dict) and v.get("kind") == "job"
        )

    def record(self, entry: dict[str, Any]) -> None:
        """Attach ``entry`` to the running test; it travels to the results file (also from xdist
        workers) and to JUnit XML as a property. While a ``once`` value is produced, entries go
        to it first and reach the tests that take the value."""
        self.runner.record(entry)

    def _record_to_test(self, entry: dict[str, Any]) -> None:
        if self.current_item is not None:
            self.current_item.user_properties.append((PROPERTY, entry))

    def _on_status(self, job_id: str, state: str, reason: str) -> None:
        line = f"job {job_id} {state}" + (f" ({reason})" if reason and reason != "None" else "")
        self.status_lines.append(line)
        # Only what an operator waits on or must know: a queue wait, its reason and the test that
        # waits; the start of a job that queued for a while; a cancel or failure.
        now = time.monotonic()
        if state == "PENDING":
            self._pending_since.setdefault(job_id, now)
            early = self.runner.ahead_label
            if early:
                line += f" (started ahead for {early})"
            elif self.current_item is not None:
                line += f" for {self.current_item.name}"
        elif state.startswith(("CANCEL", "TIMEOUT", "NODE_FAIL", "FAILED", "OUT_OF_ME")):
            self._pending_since.pop(job_id, None)
        elif job_id in self._pending_since:
            waited = now - self._pending_since.pop(job_id)
            if waited < _QUIET_WAIT_S:
                return
            line = f"job {job_id} {state} after {waited:.0f} s in the queue"
        else:
            return
        self.say(line)

    # ------------------------------------------------------------------ needs

    def shape(self) -> Shape:
        """The profile's shape and what this run found of it (``selection.Shape``)."""
        p = self.profile
        usable = p.nodes if p.executor == "local" else len(self.nodes)
        unusable = "; ".join(f"{n}: {why}" for n, why in self.excluded_nodes.items())
        if self.node_error:
            unusable = "; ".join(x for x in (unusable, self.node_error) if x)
        # A re-test of some nodes (--nodes) is a cluster of those nodes: checks across more are n/a.
        expected = len(self.settings.nodes) if self.settings.nodes else p.nodes
        return Shape(
            profile=p.name,
            executor=p.executor,
            nodes=expected,
            usable_nodes=usable,
            gpus_per_node=self.gpus_per_node,
            gpus_declared=p.gpus_per_node is not None,
            gpus_are_real=p.gpus_are_real,
            ib_hcas=p.ib_hcas,
            accounting=p.accounting,
            require_slow=p.require_slow,
            unusable=unusable,
        )

    def declared_not_applicable(self, item: pytest.Item) -> str | None:
        """Why ``item``'s own module declares it not applicable to this profile's shape, or None.

        A need the markers cannot state (one GPU per node rules out an intra-node collective, while
        nodes without GPUs still run one on CPU ranks) is declared by a module-level function
        ``gpucluster_not_applicable(gpucluster, name)`` of the test file: the session and the test's
        function name in, a reason or None out. It is asked at collection, before any job exists."""
        declared = getattr(getattr(item, "module", None), DECLARED_NOT_APPLICABLE, None)
        if not callable(declared):
            return None
        why = declared(self, getattr(item, "originalname", item.name))
        return str(why) if why else None

    # ------------------------------------------------------------------ hooks

    def pytest_report_header(self) -> list[str]:
        """The local executor's node when the caller's CUDA_VISIBLE_DEVICES chose its GPUs."""
        if self.local_gpus is None or not self.local_gpus.restricted:
            return []
        return [f"gpucluster: the node is {self.local_gpus.describe()} of this machine"]

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        """Remember the terminal for live job progress, terminal or not (CI logs); not on xdist
        workers, which have none. (At configure time the terminal reporter may not exist yet.)"""
        if not self.settings.is_xdist_worker:
            self.terminal = session.config.pluginmanager.get_plugin("terminalreporter")
            self._capture = session.config.pluginmanager.get_plugin("capturemanager")

    def say(self, line: str) -> None:
        """One live ``[gpucluster]`` line, also while a test runs with its output captured and from
        the threads of early starts (one at a time)."""
        if self.terminal is None:
            return
        with self._say_lock:
            uncaptured = self._capture.global_and_fixture_disabled() if self._capture else contextlib.nullcontext()
            with uncaptured:
                self.terminal.write_line(f"[gpucluster] {line}")

    def pytest_generate_tests(self, metafunc: pytest.Metafunc) -> None:
        """Tests taking ``node`` run once per tested node; the test id is the node name."""
        if "node" in metafunc.fixturenames:
            nodes = list(self.nodes) or ([] if self.excluded_nodes else ["no-usable-node"])
            params = [pytest.param(n, id=n) for n in nodes]
            params += [
                pytest.param(n, id=n, marks=pytest.mark.skip(reason=f"{n} is excluded: Slurm reports it {why}"))
                for n, why in self.excluded_nodes.items()
            ]
            metafunc.parametrize("node", params)

    @pytest.hookimpl(tryfirst=True)
    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        """Before ``-k``/``-m``/``--deselect`` take their pick: mark every acceptance check
        ``multinode`` (the whole acceptance of a multi-node cluster), end the checks that do not
        apply to the profile as not applicable and those that cannot run now as skipped, each
        with the reason, and remember every check's needs for the required set. Tests that use a
        job that ``runs_last`` move to the end of the run (``plan.last_order``)."""
        self._collected = []
        shape = self.shape()
        for item in items:
            if not is_check(item):
                continue
            item.add_marker(pytest.mark.multinode)
            needs = dataclasses.replace(needs_of(item), declared=self.declared_not_applicable(item) or "")
            self._collected.append(needs)
            na, blocked = not_applicable(needs, shape), cannot_run(needs, shape)
            if na:
                # First among the skip marks: a check the profile gives nothing to measure is n/a,
                # also on a node whose parameter skips it as excluded (pytest takes the first).
                item.add_marker(pytest.mark.skip(reason=NOT_APPLICABLE + na), append=False)
            elif blocked:
                item.add_marker(pytest.mark.skip(reason=blocked))
        order = last_order([_requests(item) for item in items])
        items[:] = [items[i] for i in order]

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtestloop(self, session: pytest.Session) -> None:
        """Before the first test: plan the run's jobs from the selected, runnable tests, record
        the plan, print it for a dry run, and start the light jobs it starts ahead, together."""
        config = session.config
        runnable = [item for item in session.items if not _skipped(item)]
        self.plan, early = self.make_plan(runnable)
        if self.results is not None and session.items:
            self.results.plan = self.plan.to_json()
        terminal = config.pluginmanager.get_plugin("terminalreporter")
        if config.getoption("gpucluster_dry_run", False) and terminal is not None:
            terminal.write_sep("-", f"gpucluster plan: {len(self.plan.jobs)} job(s), nothing submitted")
            for line in self.plan.lines():
                terminal.write_line(line)
        if config.option.collectonly or session.testsfailed:
            return
        started = self.runner.start_ahead(self, early)
        if started:
            self.status_lines.append("started ahead: " + ", ".join(started))

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        """Record the tested nodes (and the excluded ones, with Slurm's reason), the required set
        and what the selection left out, in the results (an xdist worker hands its view to the
        controller)."""
        self.selection = self._selection(session)
        workeroutput = getattr(session.config, "workeroutput", None)
        if workeroutput is not None:
            workeroutput["gpucluster_selection"] = self.selection.to_json()
            workeroutput["gpucluster_nodes"] = {"tested": list(self.nodes), "excluded": dict(self.excluded_nodes)}
        if self.results is not None:
            self.results.nodes = list(self.nodes)
            self.results.selection = self.selection
            if self.excluded_nodes:
                self.results.environment["excluded_nodes"] = dict(self.excluded_nodes)

    def _selection(self, session: pytest.Session) -> Selection:
        config = session.config
        named: list[str] = []
        if config.args_source == pytest.Config.ArgsSource.ARGS:
            base = config.invocation_params.dir
            for arg in config.args:
                path = arg.split("::", 1)[0]
                if "::" in arg or (base / path).is_file():
                    named.append(arg)
        return plan_selection(
            self._collected,
            [item.nodeid for item in session.items],
            self.shape(),
            named=named,
            command=list(config.invocation_params.args),
            keyword=str(config.option.keyword or ""),
            markexpr=str(config.option.markexpr or ""),
            deselect=[str(d) for d in (config.option.deselect or [])],
        )

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: Any, error: Any) -> None:
        """xdist controller: fold each worker's view of the selection into the results."""
        output = getattr(node, "workeroutput", {})
        tested = output.get("gpucluster_nodes") or {}
        if tested and self.results is not None and not self.results.nodes:
            # The controller collects nothing under xdist: the tested nodes are the workers' word.
            self.results.nodes = list(tested.get("tested", []))
            if tested.get("excluded"):
                self.results.environment.setdefault("excluded_nodes", dict(tested["excluded"]))
        data = output.get("gpucluster_selection")
        if data and self.results is not None:
            if self.results.selection is None:
                self.results.selection = Selection.from_json(data)
            else:
                self.results.selection.merge(Selection.from_json(data))

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item) -> Iterator[None]:
        """Track the running test so jobs and measurements are attributed to it."""
        self.current_item = item
        try:
            return (yield)
        finally:
            self.current_item = None

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(self, item: pytest.Item) -> Iterator[None]:
        """A check that reads a bound thresholds.toml lacks could not judge: it is skipped with the
        reason naming the file, the set and the metric, never failed (the run is INCOMPLETE)."""
        try:
            return (yield)
        except MissingThresholdError as exc:
            raise pytest.skip.Exception(COULD_NOT_JUDGE + str(exc), _use_item_location=True) from None

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(
        self, item: pytest.Item, call: pytest.CallInfo[None]
    ) -> Generator[None, pytest.TestReport, pytest.TestReport]:
        """A failure shared with an earlier test (``run.runner.SharedFailure``) is reported in its
        one line, which names that test: the traceback is shown once, not under every test. The
        suite's own errors (a job refused, lost, timed out: ``GpuClusterError``) are reported as
        their message, which names the job, node and logs; the harness's traceback says nothing
        more to an operator (``--tb=long`` shows it)."""
        report = yield
        exc = call.excinfo.value if call.excinfo is not None else None
        fault = cluster_fault(exc)
        if fault is not None:
            # Not a judgement of any node: the results mark the check not judged (faults.py).
            report.user_properties.append(
                (PROPERTY, {"kind": "cluster_fault", "what": fault.what, "sentence": fault.sentence})
            )
            self._note_fault(fault)
        if isinstance(exc, SharedFailure):
            report.longrepr = str(exc)
        elif isinstance(exc, GpuClusterError) and item.config.getoption("tbstyle", "auto") == "auto":
            report.longrepr = f"{type(exc).__module__}.{type(exc).__qualname__}: {exc}"
        return report

    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        """A check on a node lost earlier in the run fails for that node with the first evidence
        (no job is tried on it again); so does an across-nodes check once fewer than 2 nodes are
        left."""
        lost = self.lost_nodes
        if not lost:
            return
        callspec = getattr(item, "callspec", None)
        node = callspec.params.get("node") if callspec is not None else None
        if node in lost:
            pytest.fail(
                f"{node} was lost earlier in this run: {self.lost_evidence(node)}; not tested again", pytrace=False
            )
        if item.get_closest_marker("across_nodes") and len(self.live_nodes) < 2:
            gone = "; ".join(f"{n}: {self.lost_evidence(n)}" for n in lost)
            pytest.fail(f"{len(self.live_nodes)} node(s) left after losing {gone}; this check needs 2", pytrace=False)

    def lost_evidence(self, node: str) -> str:
        """How this run learned it lost ``node``: Slurm's state or what a job saw, when, and where."""
        seen = self._launcher.lost_seen.get(node) if self._launcher is not None else None
        if not seen:
            return self.lost_nodes.get(node, "lost")
        return f"{seen['why']} (seen {seen['how']}, {seen['when']})"

    def pytest_runtest_teardown(self, item: pytest.Item) -> None:
        """Nodes lost during this test go to the results, with when and how each was seen (also
        from xdist workers)."""
        lost = self.lost_nodes
        if lost and lost != self._lost_recorded:
            self._lost_recorded = lost
            seen = self._launcher.lost_seen if self._launcher is not None else {}
            facts = {n: dict(seen.get(n) or {"why": why}) for n, why in lost.items()}
            item.user_properties.append((PROPERTY, {"kind": "environment", "facts": {"lost_nodes": facts}}))

    # Each test's reports are folded into self.results by recording.py (ResultsHooks), which
    # also turns the data entries into readable JUnit properties.

    def pytest_keyboard_interrupt(self) -> None:
        """Ctrl-C or SIGTERM: cancel every job, keep what was measured."""
        self.cancel_everything()
        if self.results is not None:
            self.results.status = "interrupted"

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        """Let the jobs whose results are in leave the queue (bounded), cancel leftovers; then end
        the results, decide and record the verdicts and act on them (``finish.py``), set the exit
        status and write the final results file. First among the hooks of the run's end, so the
        report and every later reader see the verdict. The run's wall time ends with its last
        test, before this clean-up."""
        interrupted = exitstatus in (pytest.ExitCode.INTERRUPTED, 2) or bool(session.shouldstop)
        if self.results is not None:
            self.results.freeze()
        if self._launcher is not None and exitstatus != pytest.ExitCode.INTERRUPTED:
            self._launcher.settle()
        self.cancel_everything()
        if self.results is None:
            return
        status = finish(
            self.results,
            self.settings.outputs,
            pytest_status=int(session.exitstatus),
            interrupted=interrupted,
            collect_only=bool(session.config.option.collectonly),
            drain=lambda nodes: drain_rejected(nodes, executor=self.profile.executor, excluded=self.excluded_nodes),
            here=str(self.settings.results_path or "(this run, no --results file)"),
        )
        if status != session.exitstatus:
            session.exitstatus = status
        if self.settings.results_path is not None:
            self.results.write(self.settings.results_path)

    def pytest_unconfigure(self) -> None:
        """Last chance to cancel; remove a temporary job folder this run made."""
        self.cancel_everything()
        if self._owns_job_root and self._job_root is not None:
            shutil.rmtree(self._job_root, ignore_errors=True)
        elif self._job_root is not None and self.profile.shared_fs:
            # Folders no job wrote into (every submission refused, shared_fs full) go again, up to
            # shared_fs itself; a folder with any job's logs stays for the operator.
            folder, top = self._job_root, Path(self.profile.shared_fs)
            while folder != top and top in folder.parents:
                try:
                    folder.rmdir()
                except OSError:
                    break
                folder = folder.parent

    def cancel_everything(self) -> list[str]:
        """Cancel the jobs this process submitted and, for Slurm, any job still queued under this
        run's name (covers jobs of xdist workers that died before they could cancel)."""
        cancelled = self._launcher.cancel_all() if self._launcher is not None else []
        if self.profile.executor == "slurm" and not self.settings.is_xdist_worker:
            with contextlib.suppress(GpuClusterError):
                cancelled += slurm.cancel_by_name_prefix(f"gpucluster-{self.settings.run_id}-")
        return cancelled


def is_check(item: pytest.Item) -> bool:
    """Whether ``item`` is an acceptance check: it judges, uses the cluster, or states a need."""
    names = getattr(item, "fixturenames", ())
    if "judge" in names or "gpucluster" in names:
        return True
    return any(item.get_closest_marker(m) is not None for m in NEED_MARKERS if m != "slow")


def needs_of(item: pytest.Item) -> Needs:
    """A check's needs, from its markers (``plugin.MARKERS``)."""
    gpu = item.get_closest_marker("gpu")
    count = 0
    if gpu is not None:
        count = int(gpu.args[0]) if gpu.args else int(gpu.kwargs.get("count", 1))
    return Needs(
        nodeid=item.nodeid,
        across_nodes=item.get_closest_marker("across_nodes") is not None,
        gpus=count,
        gres_only=bool(gpu.kwargs.get("gres_only", False)) if gpu is not None else False,
        slurm=item.get_closest_marker("slurm") is not None,
        infiniband=item.get_closest_marker("infiniband") is not None,
        accounting=item.get_closest_marker("accounting") is not None,
        slow=item.get_closest_marker("slow") is not None,
    )


LOCAL_JOB_ROOT_PREFIX = "pytest-gpucluster-jobs-"


def _remove_orphaned_job_roots(tmp: Path) -> None:
    """Job folders of local runs whose process is gone (killed before it could clean up): the
    folder's name carries the run's process id. Folders of live runs, and of other users, stay."""
    for folder in tmp.glob(f"{LOCAL_JOB_ROOT_PREFIX}*-*"):
        pid = folder.name.removeprefix(LOCAL_JOB_ROOT_PREFIX).split("-", 1)[0]
        if not pid.isdigit() or Path(f"/proc/{pid}").exists():
            continue
        with contextlib.suppress(OSError):
            if folder.stat().st_uid == os.getuid():
                shutil.rmtree(folder, ignore_errors=True)


def _requests(item: pytest.Item) -> list[JobRequest]:
    """The job requests ``item``'s ``uses`` markers declare."""
    return [r for mark in item.iter_markers("uses") for r in mark.args if isinstance(r, JobRequest)]


def _start_args(start: Callable[..., Any]) -> list[str]:
    return list(inspect.signature(start).parameters)[1:]


def _start_params(start: Callable[..., Any], params: Mapping[str, Any]) -> tuple[tuple[str, Any], ...]:
    """The test parameters an early start takes (its arguments after the session), or () when the
    test does not supply them all (it then starts when its test runs)."""
    wanted = _start_args(start)
    if any(arg not in params for arg in wanted):
        return ()
    return tuple((arg, params[arg]) for arg in wanted)


def _skipped(item: pytest.Item) -> bool:
    """True when a skip marker (or a skipif whose conditions are plain booleans, all true)
    already decides that ``item`` will not run."""
    if item.get_closest_marker("skip") is not None:
        return True
    return any(m.args and all(a is True for a in m.args) for m in item.iter_markers("skipif"))


def install_sigterm_as_interrupt() -> None:
    """SIGTERM (a CI runner stopping us) ends the run like Ctrl-C: jobs cancelled, results kept."""
    if threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        return

    def _raise(signum: int, frame: object) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, _raise)

"""The one stateful object of a run: profile, thresholds, launcher, node list, results.

Built once in ``pytest_configure`` and registered as a plugin: its hook methods plan the run's
jobs before the first test and end the run (every job still queued is cancelled; the results
file, written by the controlling process only). Collection is ``collection.py``'s, each check's
phases ``phases.py``'s, each test's reports ``results/recording.py``'s.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import signal
import threading
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest

from pytest_gpucluster.config import Config, Profile, ThresholdSet
from pytest_gpucluster.config.options import Outputs, soak_fits
from pytest_gpucluster.errors import (
    ConfigError,
    SlurmQueryError,
)
from pytest_gpucluster.launch.local_gpus import exposed_count_error, local_gpus
from pytest_gpucluster.launch.lost import LostNodes
from pytest_gpucluster.plan import Facts, Plan
from pytest_gpucluster.plan import facts as run_facts
from pytest_gpucluster.plan import jobs as planned_jobs
from pytest_gpucluster.plan.round_cost import dry_run_lines
from pytest_gpucluster.plan.selection import (
    Shape,
)
from pytest_gpucluster.results import metrics
from pytest_gpucluster.results.document import ResultsDocument
from pytest_gpucluster.results.drain import drain_rejected
from pytest_gpucluster.results.finish import finish
from pytest_gpucluster.run import Runner, Start
from pytest_gpucluster.run import areas as _areas  # noqa: F401  (importing it registers the suite's producers)
from pytest_gpucluster.run.areas.soak import job_minutes as soak_job_minutes
from pytest_gpucluster.run.cluster import Cluster
from pytest_gpucluster.run.context import JobContext, ahead_limit_s
from pytest_gpucluster.run.environment import run_environment
from pytest_gpucluster.run.items import (
    plan_of,
    skipped,
)
from pytest_gpucluster.run.nodes import DRY_RUN_STATES_S, NodeSet
from pytest_gpucluster.run.progress import Progress
from pytest_gpucluster.run.shared_area import user_name
from pytest_gpucluster.slurm import Slurm, caller_env
from pytest_gpucluster.slurm import drain as drain_node
from pytest_gpucluster.slurm.health import default_partition, partitions
from pytest_gpucluster.slurm.retry import Outages
from pytest_gpucluster.slurm.rights import DrainRight, drain_right
from pytest_gpucluster.slurm.topology import tree_source

R = TypeVar("R")


@dataclass(frozen=True)
class Settings:
    """Resolved options: what the session needs, without a pytest.Config."""

    config: Config
    profile: Profile
    results_path: Path | None
    run_id: str
    is_controller: bool
    is_xdist_worker: bool = False
    nodes: tuple[str, ...] = ()  # --gpucluster-nodes: test only these (a re-test); empty: the profile's choice
    outputs: Outputs = dataclasses.field(default_factory=Outputs)  # what the run writes and does at its end
    thresholds_origin: str = ""  # where thresholds.toml came from: an option, the rootdir, the shipped default
    reservation_from: str = ""  # the option that named the profile's reservation for this run; empty: the profile
    soak_from: str = ""  # where the soak's duration was set: the option or the profile key, with the value
    # False for --collect-only and --gpucluster-dry-run: no job is submitted, so none is cancelled
    # at the end and Slurm is asked only what the plan needs (its nodes, its switch tree).
    submits: bool = True


class GpuClusterSession:
    """Profile + thresholds + launcher + node list + results, for one pytest run."""

    def __init__(self, settings: Settings, *, env: Mapping[str, str] | None = None) -> None:
        self.settings = settings
        self.profile = settings.profile
        self.config = settings.config
        env = os.environ if env is None else env
        self._environ = env
        self.caller_env = caller_env.CallerEnv()
        if self.profile.executor == "slurm":
            inside_allocation(self.profile.name, env)
            if isinstance(env, MutableMapping):
                # First: the caller's Slurm variables leave this process's environment
                # (slurm/caller_env.py) before any Slurm command, thread or xdist worker.
                self.caller_env = caller_env.set_aside(env)
        try:
            self._build(settings, env)
        except BaseException:
            if isinstance(env, MutableMapping):
                caller_env.put_back(env, self.caller_env)  # a refused run leaves the process as it found it
            raise

    def _build(self, settings: Settings, env: Mapping[str, str]) -> None:
        """The rest of the constructor, once the caller's Slurm variables are set aside."""
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
        self.thresholds: ThresholdSet = self.config.thresholds_for(
            self.profile, gpu_model=model, gpus_per_node=self.gpus_per_node
        )
        # What the run learns of its Slurm (the daemons' outages, within the profile's retry
        # window; which command lists nodes; sacct's output form), for every question it asks.
        self.slurm = Slurm(Outages(window_s=float(self.profile.slurm_retry_s)))
        self.node_set = NodeSet(
            self.profile,
            named=settings.nodes,
            check_named=settings.is_controller,
            reservation_from=settings.reservation_from,
            lost=LostNodes(),
            client=self.slurm,
            states_bound_s=None if settings.submits else DRY_RUN_STATES_S,
        )
        self.progress = Progress(self._waiter)
        self.runner = Runner(limit_s=ahead_limit_s(self.profile))
        self.jobs = JobContext(
            self.profile,
            run_id=settings.run_id,
            gpus_per_node=self.gpus_per_node,
            gpu_model=self.gpu_model,
            thresholds=self.thresholds,
            nodes=self.node_set,
            local_gpus=self.local_gpus,
            runner=self.runner,
            is_xdist_worker=settings.is_xdist_worker,
            progress=self.progress,
        )
        self.cluster = Cluster(self.jobs)
        self.results: ResultsDocument | None = None
        if settings.is_controller:
            self.results = ResultsDocument(
                profile=self.profile.name,
                thresholds_file=str(self.config.path),
                thresholds_origin=settings.thresholds_origin,
                thresholds_sha256=hashlib.sha256(self.config.path.read_bytes()).hexdigest(),
                environment=run_environment(
                    self.profile, self.thresholds.name, self.local_gpus, self.slurm if settings.submits else None
                ),
            )
        if self.profile.executor == "slurm" and self.results is not None:
            self.results.environment["caller_slurm_env"] = self.caller_env.to_json()
        if settings.is_controller and self.profile.executor == "slurm" and self.profile.soak.duration_s > 0:
            self._check_soak_fits(settings.soak_from)
        # Whether this user may drain the nodes the run rejects, asked before any job.
        self.drain_right: DrainRight | None = None
        if settings.outputs.drain_failed and self.profile.executor == "slurm" and settings.is_controller:
            self.drain_right = drain_right(user_name(), os.geteuid())
            if self.results is not None:
                self.results.environment["drain_right"] = self.drain_right.to_json()

    def _check_soak_fits(self, asked: str) -> None:
        """Before any job: each node's soak job fits the partition's time limit (a usage error
        naming the duration and the limit otherwise); where Slurm cannot answer now, the run's
        Slurm health check says so later."""
        try:
            found = partitions(self.slurm)
        except SlurmQueryError:
            return
        name = self.profile.partition or default_partition(found)
        part = next((p for p in found if p.name == name), None)
        if part is not None:
            soak = self.profile.soak
            limit = soak_job_minutes(soak.duration_s, soak.config(real_gpus=self.profile.gpus_are_real).cycle_s)
            soak_fits(limit, part.max_time_s, part.name, asked or "the soak")

    # ------------------------------------------------------------------ facts

    # ------------------------------------------------------------------ the nodes

    @property
    def nodes(self) -> tuple[str, ...]:
        """The nodes this run tests (``run.nodes.NodeSet``), recorded in the results."""
        first = not self.node_set.resolved
        nodes = self.node_set.nodes
        if first and self.results is not None:
            self.results.nodes = list(nodes)
        return nodes

    @property
    def excluded_nodes(self) -> dict[str, str]:
        return self.node_set.excluded

    @property
    def lost_nodes(self) -> dict[str, str]:
        """Nodes that failed under a job of this run (name → Slurm's state and reason)."""
        return self.node_set.lost

    @property
    def live_nodes(self) -> tuple[str, ...]:
        """The tested nodes less those lost during the run."""
        return self.node_set.live

    @property
    def plan(self) -> Plan:
        return self.jobs.plan

    # ------------------------------------------------------------------ the plan

    def make_plan(self, items: list[pytest.Item]) -> tuple[Plan, list[Start]]:
        """The plan for the runnable ``items`` and the early starts of the jobs it starts ahead
        (``items.plan_of``)."""
        known = Facts(
            gpus_per_node=self.gpus_per_node,
            flags=run_facts.flags(self.profile, self.gpus_per_node),
            sees_whole_selection=not self.settings.is_xdist_worker,
        )
        return plan_of(items, known)

    def record(self, entry: dict[str, Any]) -> None:
        """Attach ``entry`` to the running test; it travels to the results file (also from xdist
        workers) and to JUnit XML as a property. While a ``once`` value is produced, entries go
        to it first and reach the tests that take the value."""
        self.runner.record(entry)

    def _waiter(self) -> str:
        """Who waits on a pending job: an early start, or the running test."""
        early = self.runner.ahead_label
        if early:
            return f"(started ahead for {early})"
        return f"for {self.runner.test.name}" if self.runner.test is not None else ""

    def say(self, line: str) -> None:
        """One live ``[gpucluster]`` line (``progress.Progress``)."""
        self.progress.say(line)

    @property
    def status_lines(self) -> list[str]:
        return self.progress.lines

    # ------------------------------------------------------------------ needs

    def shape(self) -> Shape:
        """The profile's shape and what this run found of it (``NodeSet.shape``)."""
        return self.node_set.shape(self.gpus_per_node)

    # ------------------------------------------------------------------ hooks

    def pytest_report_header(self) -> list[str]:
        """The profile and the thresholds file in force, where it came from; the local executor's
        node when the caller's CUDA_VISIBLE_DEVICES chose its GPUs."""
        lines = [
            f"gpucluster: profile {self.profile.name!r} ({self.profile.executor}); thresholds "
            f"{self.config.path} ({self.settings.thresholds_origin or 'named'}), set {self.thresholds.name!r}"
        ]
        if self.local_gpus is not None and self.local_gpus.restricted:
            lines.append(f"gpucluster: the node is {self.local_gpus.describe()} of this machine")
        return lines

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        """Remember the terminal for live job progress, terminal or not (CI logs); not on xdist
        workers, which have none. (At configure time the terminal reporter may not exist yet.)"""
        if not self.settings.is_xdist_worker:
            plugins = session.config.pluginmanager
            self.progress.attach(plugins.get_plugin("terminalreporter"), plugins.get_plugin("capturemanager"))
            for note in self.notes():
                self.progress.status(f"warning: {note}")

    def notes(self) -> list[str]:
        """What the operator must know before any job: the caller's Slurm variables the run
        submits without, and a ``--gpucluster-drain-failed`` this user may not carry out."""
        right = self.drain_right
        drain = f"--gpucluster-drain-failed: {right.sentence}" if right is not None and right.allowed is False else ""
        return [line for line in (self.caller_env.warning(), drain) if line]

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtestloop(self, session: pytest.Session) -> None:
        """Before the first test: plan the run's jobs from the selected, runnable tests, record
        the plan, print it for a dry run, and start the light jobs it starts ahead, together."""
        config = session.config
        runnable = [item for item in session.items if not skipped(item)]
        self.jobs.plan, early = self.make_plan(runnable)
        if self.results is not None and session.items:
            self.results.plan = self.plan
        terminal = config.pluginmanager.get_plugin("terminalreporter")
        if config.getoption("gpucluster_dry_run", False) and terminal is not None:
            terminal.write_sep("-", f"gpucluster plan: {len(self.plan.jobs)} job(s), nothing submitted")
            for line in self.node_set.plan_lines():
                terminal.write_line(line)
            for line in self.plan.lines():
                terminal.write_line(line)
            if self.plan.has(planned_jobs.NCCL_INTER.key):
                at_once = self.profile.nccl_across.groups_at_once
                ops = len(self.profile.nccl.ops)
                on_slurm = self.profile.executor == "slurm"
                source = tree_source(self.profile.topology, on_slurm=on_slurm, client=self.slurm)
                for line in dry_run_lines(
                    self.nodes, source.tree, ops=ops, groups_at_once=at_once, tree_from=source.where
                ):
                    terminal.write_line(line)
        if config.option.collectonly or session.testsfailed:
            return
        held = self.node_set.wait_for_other_work(
            float(self.profile.queue_timeout_s), f"gpucluster-{self.settings.run_id}-", self.say
        )
        if held:
            self.status_lines.append(f"{self.node_set.held_sentence}: left out of every job of this run")
            self._record_held()
        started = self.runner.start_ahead(self.jobs, early)
        if started:
            self.status_lines.append("started ahead: " + ", ".join(started))

    # Each test's reports are folded into self.results by results/recording.py (ResultsHooks), which
    # also turns the data entries into readable JUnit properties.

    def _record_held(self) -> None:
        """The nodes other work held, in the results' environment (and a worker's view of it)."""
        if self.results is not None:
            self.results.environment["held_nodes"] = dict(self.node_set.held)

    def pytest_keyboard_interrupt(self) -> None:
        """Ctrl-C or SIGTERM: cancel every job, keep what was measured."""
        self.cancel_everything()
        if self.results is not None:
            self.results.status = "interrupted"

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        """Let the jobs whose results are in leave the queue (bounded), cancel leftovers; then end
        the results, decide and record the verdicts and act on them (``results/finish.py``), set the exit
        status and write the final results file. First among the hooks of the run's end, so the
        report and every later reader see the verdict. The run's wall time ends with its last
        test, before this clean-up."""
        interrupted = exitstatus in (pytest.ExitCode.INTERRUPTED, 2) or bool(session.shouldstop)
        if self.results is not None:
            self.results.freeze()
        launcher = self.jobs.launched
        if launcher is not None and exitstatus != pytest.ExitCode.INTERRUPTED:
            launcher.settle()
        self.cancel_everything()
        if self.results is None:
            return
        status = finish(
            self.results,
            self.settings.outputs,
            pytest_status=int(session.exitstatus),
            interrupted=interrupted,
            collect_only=bool(session.config.option.collectonly),
            drain=lambda nodes: drain_rejected(
                nodes,
                executor=self.profile.executor,
                excluded=self.excluded_nodes,
                drain=lambda node, reason: drain_node(self.slurm, node, reason),
                right=self.drain_right,
            ),
            here=str(self.settings.results_path or "(this run, no --gpucluster-results file)"),
        )
        if status != session.exitstatus:
            session.exitstatus = status
        # A run that only planned (--collect-only, --gpucluster-dry-run) judged no node: it leaves
        # the last real run's metrics file as it is.
        metrics_path = self.settings.outputs.metrics_path
        if not (self.settings.is_controller and self.settings.submits):
            metrics_path = None
        # The document is encoded once for both files.
        document = self.results.to_json() if metrics_path is not None else None
        if self.settings.results_path is not None:
            self.results.write(self.settings.results_path, document)
        if metrics_path is not None and document is not None:
            metrics.write(metrics_path, document)

    def pytest_unconfigure(self) -> None:
        """Last chance to cancel; remove a temporary job folder this run made; give the caller's
        Slurm variables back to this process's environment."""
        self.cancel_everything()
        if isinstance(self._environ, MutableMapping):
            caller_env.put_back(self._environ, self.caller_env)
        self.jobs.folders.clean_up()

    def cancel_everything(self) -> list[str]:
        """Cancel the jobs this process submitted and, for Slurm, any job still queued under this
        run's name (covers jobs of xdist workers that died before they could cancel). A run that
        submits nothing asks nothing."""
        if not self.settings.submits:
            return []
        return self.jobs.cancel_everything(by_name=not self.settings.is_xdist_worker)


def inside_allocation(profile: str, env: Mapping[str, str]) -> None:
    """A run of a Slurm profile started inside a Slurm allocation (``SLURM_JOB_ID`` set: salloc,
    an sbatch script, srun) is refused before any job: its jobs would inherit that allocation's
    settings and could queue behind it until ``queue_timeout_s``."""
    job = caller_env.allocation_of(env)
    if job is not None:
        raise ConfigError(
            f"SLURM_JOB_ID={job}: this run is inside Slurm allocation {job} (salloc, an sbatch script or srun), "
            f"and profile {profile!r} submits jobs of its own, which would inherit that allocation's settings "
            f"and could wait behind it. Run pytest from a shell outside any allocation (leave the salloc "
            "shell with `exit`); nothing has been submitted."
        )


def install_sigterm_as_interrupt() -> None:
    """SIGTERM (a CI runner stopping us) ends the run like Ctrl-C: jobs cancelled, results kept."""
    if threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        return

    def _raise(signum: int, frame: object) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, _raise)

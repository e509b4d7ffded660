"""The soak: one long job per node, all submitted at once after the one-shot checks, each running
cycles of load on every GPU until the soak's duration ends (``workloads.soak``).

While the jobs run, a follower thread reads every GPU's stream of cycles from the shared
filesystem, judges what has arrived (``checks.soak``), prints the soak's progress, and ends a
node's soak early once it has a failing finding (the node goes to repair; the others go on), or
every node's at the first failure with ``fail_fast``. However the soak ends, every finished cycle
is kept: a lost node or a Slurm time limit ends that node's job, an interrupt (Ctrl-C, SIGTERM)
the run, and the results' ``soak`` section holds what arrived before, with how long each node was
soaked.
"""

from __future__ import annotations

import contextlib
import math
import secrets
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_gpucluster.checks import soak as soak_checks
from pytest_gpucluster.checks.soak import Lines, SoakTrack
from pytest_gpucluster.config import Profile, ThresholdSet
from pytest_gpucluster.config.profile import soak_rules_for
from pytest_gpucluster.config.soak import SoakRules, say_duration
from pytest_gpucluster.errors import GpuClusterError
from pytest_gpucluster.launch import Job
from pytest_gpucluster.plan import jobs
from pytest_gpucluster.results import codec
from pytest_gpucluster.run.context import JobContext
from pytest_gpucluster.run.produce import produces, spec_of
from pytest_gpucluster.verdict import Finding
from pytest_gpucluster.workloads import sdc as sdc_load
from pytest_gpucluster.workloads.soak import STOP_ALL, SoakConfig, config_dict, read_stream, stop_name

# Beyond the duration, what a node's job may take: the start-up, the cycle under way when the
# duration ends, and the way out.
START_MARGIN_S = 300.0
POLL_S = 2.0


def job_minutes(duration_s: float, cycle_s: float) -> int:
    """A node's time limit: the duration, two cycles and ``START_MARGIN_S``, in whole minutes."""
    return max(2, math.ceil((duration_s + 2 * cycle_s + START_MARGIN_S) / 60.0))


def lines_of(profile: Profile, thresholds: ThresholdSet) -> Lines:
    """The suite's own lines a soak reuses: temperatures from the run's set, the fabric rules."""

    def bound(metric: str) -> tuple[float | None, float | None, str] | None:
        t = thresholds.get(metric)
        return (t.fail_above, t.warn_above, t.evidence or t.source) if t is not None else None

    return Lines(bound("gpu.temperature"), bound("gpu.memory_temperature"), profile.fabric)


@dataclass(frozen=True)
class NodeSoak:
    """How one node's soak ended: its job, the streams' last word (``duration``: the soak's
    length reached; ``stopped``: ended for its own failure; ``stopped_all``: ended at another
    node's failure) or ``failed``/``interrupted``, and the job's error where it failed."""

    job_id: str
    ended: str
    error: GpuClusterError | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"job_id": self.job_id, "ended": self.ended}
        if self.error is not None:
            out["error"] = (str(self.error).strip().splitlines() or [type(self.error).__name__])[0]
        return out


@dataclass(frozen=True)
class SoakRun:
    """The soak of every node: how each ended, the findings, and the cycles as they arrived."""

    requested_s: float
    nodes: Mapping[str, NodeSoak]
    findings: tuple[Finding, ...]
    track: SoakTrack
    first_failure: str = ""  # the node whose failure ended every node's soak (fail_fast)

    def of_node(self, node: str) -> list[Finding]:
        """The findings on ``node`` (its GPUs, ports and all_reduce)."""
        return [f for f in self.findings if node in f.nodes]

    def unjudged(self, node: str) -> list[Finding]:
        """Why ``node``'s soak cannot be judged whole (never a pass): it finished no cycle, or the
        first failure of another node ended it early."""
        done = self.track.soaked_s(node)
        soaked = f"{say_duration(done)} of {say_duration(self.requested_s)} in {self.track.cycles(node)} cycles"
        ended = self.nodes.get(node)
        if self.track.cycles(node) == 0:
            return [Finding.across([node], f"{node} finished no soak cycle", severity="not_judged")]
        if ended is not None and ended.ended == "stopped_all" and self.first_failure != node:
            text = f"{node}'s soak ended after {soaked} when {self.first_failure} failed (fail_fast)"
            return [Finding.across([node], text, severity="not_judged")]
        return []

    def summary(self, node: str) -> str:
        """``node1 soaked 10 min of 10 min in 10 cycles``: for the check's message."""
        done = say_duration(self.track.soaked_s(node))
        return f"{node} soaked {done} of {say_duration(self.requested_s)} in {self.track.cycles(node)} cycles"


@dataclass
class Follower:
    """Reads the streams while the soak runs (a thread), judges what arrived, stops the nodes that
    failed, and says the progress; ``poll`` once more after the jobs end reads the rest."""

    folder: Path
    judge: Callable[[SoakTrack], list[Finding]]
    requested_s: float
    cycle_s: float
    say: Callable[[str], None]
    fail_fast: bool = False
    track: SoakTrack = field(default_factory=SoakTrack)
    stopped: dict[str, Finding] = field(default_factory=dict)  # node → the finding that ended its soak
    first_failure: str = ""
    _offsets: dict[Path, int] = field(default_factory=dict)
    _judged_at: float = 0.0
    _said_at: float = 0.0
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="gpucluster-soak", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        said = False
        while not self._stop.wait(POLL_S):
            try:
                self.poll()
            except Exception as exc:  # tried again next time; the soak is judged again at its end
                if not said:
                    said = True
                    self.say(
                        f"soak: reading the streams in {self.folder} failed ({type(exc).__name__}: {exc}); retrying"
                    )

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)

    def poll(self, *, final: bool = False) -> None:
        """Read what the streams hold beyond what was read; judge (at most every half cycle while
        running), end the soak of nodes that failed, and say the progress now and then."""
        with self._lock:
            new = 0
            for path in sorted(self.folder.glob("*.jsonl")):
                records, self._offsets[path] = read_stream(path, self._offsets.get(path, 0))
                new += self.track.add(records)
            now = time.monotonic()
            if new and not final and now - self._judged_at >= max(POLL_S, self.cycle_s / 2):
                self._judged_at = now
                self._act_on(self.judge(self.track))
            if not final and now - self._said_at >= max(15.0, min(300.0, 2 * self.cycle_s)) and self.track.gpus:
                self._said_at = now
                self.say(soak_checks.progress(self.track, self.requested_s, time.time()))

    def _act_on(self, findings: list[Finding]) -> None:
        for f in findings:
            for node in f.convicts:
                if node in self.stopped:
                    continue
                self.stopped[node] = f
                self._write(stop_name(node))
                self.say(f"soak: {f.text}; {node}'s soak ends here (it goes to repair), the others go on")
                if self.fail_fast and not self.first_failure:
                    self.first_failure = node
                    self._write(STOP_ALL)
                    self.say(f"soak: every node's soak ends at this first failure (fail_fast), on {node}")

    def _write(self, name: str) -> None:
        with contextlib.suppress(OSError):
            (self.folder / name).touch()


@produces(jobs.SOAK)
def soak(ctx: JobContext) -> SoakRun:
    """Every node's soak, once per run (module docstring)."""
    return ctx.once(jobs.SOAK.key, lambda: _soak(ctx))


def _soak(ctx: JobContext) -> SoakRun:
    profile = ctx.profile
    requested = profile.soak.duration_s
    real = profile.gpus_are_real and ctx.gpus_per_node > 0
    config: SoakConfig = profile.soak.config(real_gpus=real)
    # CPU ranks standing in for GPUs (no GPU devices, or GRES-only GPUs) take their own rules.
    rules, lines = soak_rules_for(profile, real_gpus=real), lines_of(profile, ctx.thresholds)
    folder = ctx.job_root / f"soak-{secrets.token_hex(3)}"
    folder.mkdir(parents=True)
    follower = Follower(
        folder,
        lambda track: soak_checks.judge(track, rules, lines),
        requested,
        config.cycle_s,
        ctx.say,
        fail_fast=profile.soak.fail_fast,
    )
    submitted: dict[str, Job[Any]] = {}
    ended: dict[str, NodeSoak] = {}
    for node in ctx.live_or_fault():
        spec = spec_of(
            ctx,
            jobs.SOAK,
            name=f"soak-{node}",
            nodelist=(node,),
            timeout_min=job_minutes(requested, config.cycle_s),
        )
        try:
            submitted[node] = ctx.submit(
                jobs.SOAK.workload,  # type: ignore[arg-type]
                spec,
                config=config,
                sdc=profile.sdc if real else sdc_load.TINY,
                duration_s=requested,
                stream_dir=str(folder),
                fabric_root=profile.fabric_sysfs_root,
            )
        except GpuClusterError as exc:  # a node lost earlier: that node's verdict only
            ended[node] = NodeSoak("", "failed", exc)
    ranks = "" if real else f"; CPU ranks stand in, judged by {rules.for_cpu_ranks()}"
    ctx.say(f"soak of {say_duration(requested)} on {len(submitted)} node(s), cycles of {config.cycle_s:g} s{ranks}")
    follower.start()
    try:
        for node, job in submitted.items():
            try:
                job.results()
                ended[node] = NodeSoak(job.job_id, "")
            except GpuClusterError as exc:  # one node's failure is that node's verdict only
                ended[node] = NodeSoak(job.job_id, "failed", exc)
    except BaseException:
        # Interrupted: every finished cycle is kept, and the check says how far the soak came.
        follower.stop()
        follower.poll(final=True)
        for node, job in submitted.items():
            ended.setdefault(node, NodeSoak(job.job_id, "interrupted"))
        _record(ctx, follower, ended, requested, config, rules, [], interrupted=True)
        raise
    follower.stop()
    follower.poll(final=True)
    ended = {n: _with_stream_end(e, follower.track, n) for n, e in ended.items()}
    findings = soak_checks.judge(follower.track, rules, lines)
    _record(ctx, follower, ended, requested, config, rules, findings, interrupted=False)
    return SoakRun(requested, ended, tuple(findings), follower.track, follower.first_failure)


def _with_stream_end(state: NodeSoak, track: SoakTrack, node: str) -> NodeSoak:
    """A node whose job ended well takes its streams' word on why (the duration, its own stop,
    every node's stop)."""
    if state.ended:
        return state
    words = {str(t.end.get("ended")) for t in track.of_node(node) if t.end}
    return NodeSoak(state.job_id, next(iter(words)) if len(words) == 1 else "duration")


def _record(
    ctx: JobContext,
    follower: Follower,
    ended: Mapping[str, NodeSoak],
    requested: float,
    config: SoakConfig,
    rules: SoakRules,
    findings: list[Finding],
    *,
    interrupted: bool,
) -> None:
    """The results' ``soak`` section; when interrupted, also why the soak checks are not judged:
    how long each node was soaked."""
    track = follower.track
    section = soak_checks.section(
        track,
        requested_s=requested,
        config=config_dict(config),
        rules=rules,
        nodes={n: e.to_json() for n, e in ended.items()},
    )
    section["findings"] = [codec.encode_finding(f) for f in findings]
    section["stream_folder"] = str(follower.folder)
    if interrupted:
        section["interrupted"] = True
        reached = ", ".join(f"{n} {say_duration(track.soaked_s(n))} ({track.cycles(n)} cycles)" for n in sorted(ended))
        text = f"the soak of {say_duration(requested)} was interrupted; finished cycles kept: {reached or 'none'}"
        ctx.runner.record(codec.finding_entry(Finding.across(list(ended), text, severity="not_judged")))
    ctx.runner.record({"kind": "soak", "section": section})

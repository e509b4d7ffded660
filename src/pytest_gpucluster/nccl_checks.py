"""Login side of the collective checks: plan the sweeps, launch them through the session, retry a
performance miss, isolate a bad node, and turn a sweep into a Measurement and a plot series.

What runs on the nodes is ``workloads/collectives.py`` (torch) or ``workloads/nccl_tests.py``
(nccl-tests binaries); the arithmetic is ``workloads/busbw.py``; pairing is ``checks/pairing.py``.
Rules kept here: a wrong result is never retried and fails whatever its speed; a slow one is
re-measured up to ``nccl.retries`` times; the verdict uses the lowest busbw over the sizes
≥ ``nccl.judge_from_bytes``, never the sweep average. The across-node sweeps take their sizes and
repetitions from ``[nccl_across]`` where the profile sets them there.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pytest_gpucluster.checks.busbw import describe_judged
from pytest_gpucluster.checks.pairing import Isolation, Pair, isolate
from pytest_gpucluster.config import NVLS_COLLECTIVES, NcclSettings, Threshold
from pytest_gpucluster.config.profile import sweep_settings
from pytest_gpucluster.errors import GpuClusterError
from pytest_gpucluster.plan import facts, jobs
from pytest_gpucluster.sizing import check_fits, gpu_memory_bytes
from pytest_gpucluster.verdict import Measurement, judge
from pytest_gpucluster.workloads.busbw import SweepResult
from pytest_gpucluster.workloads.collectives import Groups, collective_sweeps
from pytest_gpucluster.workloads.compute import ComputePlan, GpuCeiling, plan_compute
from pytest_gpucluster.workloads.nccl_tests import run_nccl_tests
from pytest_gpucluster.workloads.node_gpus import node_gpus_job
from pytest_gpucluster.workloads.node_probe import NodeProbe
from pytest_gpucluster.workloads.telemetry import NodeTelemetry, under_telemetry

if TYPE_CHECKING:
    from pytest_gpucluster.run.context import JobContext as GpuClusterSession

# The areas (test files) the node probe serves: each is given the probe's part of a shared job.
PROBE_AREAS = ("gpu_health", "infiniband", "inventory", "dcgm")


@dataclass(frozen=True)
class Check:
    """One collective on one communicator, ready to judge."""

    sweep: SweepResult
    metric: str
    threshold: Threshold | None
    measurement: Measurement | None
    problems: tuple[str, ...]  # wrong results: fail, never retried
    attempts: tuple[SweepResult, ...] = ()
    isolation: Isolation | None = None
    series: dict[str, Any] = field(default_factory=dict)

    @property
    def fails(self) -> bool:
        """The measurement is under its fail line (correctness is judged separately)."""
        if self.measurement is None or self.threshold is None:
            return False
        return judge(self.measurement, self.threshold).status == "fail"


def metric_name(gc: GpuClusterSession, op: str, scope: str) -> str:
    """``nccl.<op>.<scope>``; inside a node with NVLS allowed (``nccl.nvls``), ``intra_node_nvls``
    for the collectives NCCL can run on NVLS, so they are never judged by an NVLS-off line."""
    if scope == "intra_node" and gc.profile.nccl.nvls and op in NVLS_COLLECTIVES:
        return f"nccl.{op}.intra_node_nvls"
    return f"nccl.{op}.{scope}"


def settings(gc: GpuClusterSession, *, across: bool) -> NcclSettings:
    """The sweep settings of the across-node sweeps (``[nccl_across]`` over ``[nccl]``) or of the
    intra-node ones (``[nccl]``)."""
    return sweep_settings(gc.profile, across=across)


def _across(metric: str) -> bool:
    return metric.endswith(".inter_node")


def tasks_per_node(gc: GpuClusterSession) -> int:
    """One process per GPU; two per node where the GPUs are not real (gloo on CPU)."""
    return facts.ranks_per_node(gc.profile, gc.gpus_per_node)


# Set by the profile, these leave NCCL's logging as the site wants it (and the sweeps record only
# what was asked for, not NCCL's transports).
NCCL_DEBUG_VARS = ("NCCL_DEBUG", "NCCL_DEBUG_FILE", "NCCL_DEBUG_SUBSYS")


def nccl_log_env(gc: GpuClusterSession, name: str) -> dict[str, str]:
    """NCCL's INFO lines of initialisation into files of their own in the run's job folder, one
    per process (``%h.%p``), next to the job's logs: the sweep reads its transports from them.
    Nothing where the GPUs are not real or the profile sets NCCL's logging itself."""
    if not (gc.profile.gpus_are_real and gc.gpus_per_node) or any(k in gc.profile.env for k in NCCL_DEBUG_VARS):
        return {}
    path = gc.job_root / f"nccl-{name}-{uuid.uuid4().hex[:6]}.%h.%p.log"
    return {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,ENV", "NCCL_DEBUG_FILE": str(path)}


def _intra_env(gc: GpuClusterSession, name: str = "intra") -> dict[str, str]:
    # NVLS raises all_reduce busbw by a third: keep it off unless the profile judges it
    env = nccl_log_env(gc, name)
    return env if gc.profile.nccl.nvls else {"NCCL_NVLS_ENABLE": "0", **env}


def inter_env(gc: GpuClusterSession, name: str = "inter") -> dict[str, str]:
    """The across-node sweeps' environment: ``NCCL_ALGO`` from ``[nccl] inter_node_algo`` (none
    for ``auto``), so busbw on Ring is the network's and not tree's or NVLS-tree's."""
    algo = gc.profile.nccl.inter_node_algo
    return {**({} if algo == "auto" else {"NCCL_ALGO": algo}), **nccl_log_env(gc, name)}


def run_sweeps(
    gc: GpuClusterSession,
    name: str,
    *,
    groups: Groups,
    ops: Sequence[str],
    nodelist: tuple[str, ...] | None = None,
    env: dict[str, str] | None = None,
    min_bytes: int | None = None,
    corrupt_rank: int | None = None,
) -> list[SweepResult]:
    """One job over ``nodelist`` (default: every tested node); every group's sweeps."""
    return _run(
        gc,
        name,
        groups=groups,
        ops=ops,
        nodelist=nodelist,
        env=env,
        min_bytes=min_bytes,
        corrupt_rank=corrupt_rank,
        sampled=False,
    ).sweeps


@dataclass(frozen=True)
class IntraNodeRun:
    """The run's intra-node job: every node's sweeps, what the telemetry sampler saw and, where
    they rode along, every GPU's compute ceilings (``ceilings_ride_along``) and every node's
    probe (``probe_rides_along``, node → NodeProbe)."""

    sweeps: list[SweepResult]
    telemetry: list[NodeTelemetry]
    ceilings: list[GpuCeiling] | None = None
    job_id: str = ""
    probes: dict[str, NodeProbe] | None = None


def _uses_nccl_tests(gc: GpuClusterSession, groups: Groups) -> bool:
    return groups == "node" and facts.uses_nccl_tests(gc.profile, gc.gpus_per_node)


def no_intra_node_collective(gc: GpuClusterSession) -> str | None:
    """Why the profile's nodes have no intra-node collective, or None (``plan.facts``)."""
    return facts.no_intra_node_collective(gc.gpus_per_node)


def probe_rides_along(gc: GpuClusterSession) -> bool:
    """Whether the plan reads the node probe (GPU health, InfiniBand, inventory, dcgmi) in the
    intra-node job, first, instead of a job of its own started ahead. The probe holds every GPU, as
    that job does; one job fewer is one start of a job fewer, and the GPUs are then free at the
    start of the run for the isolation pair."""
    return gc.plan.rides_in(jobs.NODE_PROBE.key) == jobs.NCCL_INTRA.key


def ceilings_ride_along(gc: GpuClusterSession) -> ComputePlan | None:
    """The compute plan when the plan measures the ceilings in the intra-node job, first, instead
    of a job of their own (two jobs one after the other would each pay the scheduler's start)."""
    if gc.plan.rides_in(jobs.CEILINGS.key) != jobs.NCCL_INTRA.key:
        return None
    return plan_compute(gc.profile.compute, gpus_per_node=gc.gpus_per_node, real_gpus=gc.profile.gpus_are_real)


def _run(
    gc: GpuClusterSession,
    name: str,
    *,
    groups: Groups,
    ops: Sequence[str],
    nodelist: tuple[str, ...] | None,
    env: dict[str, str] | None,
    min_bytes: int | None,
    corrupt_rank: int | None,
    sampled: bool,
    ceilings: ComputePlan | None = None,
    probe: bool = False,
) -> IntraNodeRun:
    """``run_sweeps``; with ``sampled`` the job runs under the telemetry sampler (one per node),
    with ``ceilings`` each GPU's compute ceilings are measured first in the same job, with
    ``probe`` every node's probe is read before anything else."""
    across = groups != "node"
    s = settings(gc, across=across)
    memory = gpu_memory_bytes(gc.gpu_model) if gc.profile.gpus_are_real and gc.gpus_per_node else None
    if memory is not None:
        table = "nccl_across" if across and gc.profile.nccl_across.max_bytes is not None else "nccl"
        # Out of place: input and output buffers, plus the reference the result is checked against.
        check_fits(
            3 * s.max_bytes,
            memory,
            f"[profiles.{gc.profile.name}.{table}] max_bytes = {s.max_bytes} "
            f"(3 buffers of that size on each {gc.gpu_model})",
        )
    use_tool = _uses_nccl_tests(gc, groups)
    if nodelist is None:
        spec = gc.spec(name, all_nodes=True, tasks_per_node=1 if use_tool else tasks_per_node(gc), env=env)
    else:
        spec = gc.spec(name, nodelist=nodelist, tasks_per_node=1 if use_tool else tasks_per_node(gc), env=env)
    if use_tool:
        fn: Any = run_nccl_tests
        kwargs: dict[str, Any] = dict(
            nccl_tests_dir=s.nccl_tests_dir,
            ops=tuple(ops),
            min_bytes=min_bytes or s.min_bytes,
            max_bytes=s.max_bytes,
            warmup_iters=s.warmup_iters,
            iters=s.iters,
            gpus=gc.gpus_per_node,
            timeout_s=s.timeout_s,
        )
    else:
        fn = collective_sweeps
        kwargs = dict(
            ops=tuple(ops),
            min_bytes=min_bytes or s.min_bytes,
            max_bytes=s.max_bytes,
            warmup_iters=s.warmup_iters,
            iters=s.iters,
            groups=groups,
            timeout_s=s.timeout_s,
            corrupt_rank=corrupt_rank,
        )
    if (ceilings is not None or probe) and fn is collective_sweeps:
        both = gc.run(
            node_gpus_job,
            spec,
            compute=ceilings.config if ceilings else None,
            probe=probe,
            shared_fs=gc.profile.shared_fs,
            **kwargs,
        )
        parts = [r.value for r in both]
        sweeps_span = _span(p.sweeps_span for p in parts)
        areas = {"nccl": sweeps_span, "telemetry": sweeps_span}
        if ceilings is not None:
            areas["compute"] = _span(p.ceilings_span for p in parts)
        probes = {p.probe.node: p.probe for p in parts if p.probe is not None}
        if probe:
            probe_span = _span(p.probe_span for p in parts if p.probe is not None)
            areas.update(dict.fromkeys(PROBE_AREAS, probe_span))
        gc.note_parts(both[0].job_id, areas)
        return IntraNodeRun(
            [sweep for p in parts for sweep in p.sweeps.value],
            [p.sweeps.telemetry for p in parts if p.sweeps.telemetry is not None],
            [p.ceiling for p in parts if p.ceiling is not None] if ceilings is not None else None,
            both[0].job_id,
            probes if probe else None,
        )
    if not sampled:
        plain = gc.run(fn, spec, **kwargs)
        return IntraNodeRun([sweep for r in plain for sweep in r.value], [], None, plain[0].job_id)
    wrapped = gc.run(under_telemetry, spec, fn=fn, **kwargs)
    sweeps = [sweep for r in wrapped for sweep in r.value.value]
    return IntraNodeRun(
        sweeps, [r.value.telemetry for r in wrapped if r.value.telemetry is not None], None, wrapped[0].job_id
    )


def _span(spans: Iterable[tuple[float, float] | None]) -> tuple[float, float]:
    """First start to last end of the tasks' spans of one phase."""
    known = [s for s in spans if s is not None]
    return (min(s[0] for s in known), max(s[1] for s in known)) if known else (0.0, 0.0)


def _find(sweeps: Sequence[SweepResult], nodes: tuple[str, ...], op: str) -> SweepResult:
    for sweep in sweeps:
        if sweep.op == op and set(sweep.nodes) == set(nodes):
            return sweep
    seen = sorted({"+".join(s.nodes) for s in sweeps})
    raise GpuClusterError(
        f"no {op} result for {'+'.join(nodes)} (results came from {seen or 'no node'}); "
        "the node names Slurm gave the job differ from the tested nodes, or the job returned nothing"
    )


def measurement_of(
    sweep: SweepResult, metric: str, judge_from_bytes: int, attempts: Sequence[SweepResult] = ()
) -> Measurement | None:
    """The value a verdict uses: the lowest busbw over sizes ≥ ``judge_from_bytes`` (both
    placements), with where, size and placement in the detail; None for a sweep with no row."""
    row = sweep.judged_row(judge_from_bytes)
    if row is None:
        return None
    sizes = sorted({r.size_bytes for r in sweep.rows})
    detail = describe_judged(row, judge_from_bytes, sizes) + f", {sweep.n_ranks} ranks, {sweep.backend}"
    if sweep.nccl_choice():
        detail += f" ({sweep.nccl_choice()})"
    earlier = [a.judged_row(judge_from_bytes) for a in attempts[:-1]]
    if earlier:
        values = ", ".join(f"{r.busbw:.4g}" for r in earlier if r is not None)
        detail += f", attempt {len(attempts)} (earlier: {values} GB/s)"
    return Measurement(metric=metric, value=row.busbw, unit="GB/s", where=sweep.where, detail=detail)


def make_check(gc: GpuClusterSession, sweep: SweepResult, metric: str, attempts: Sequence[SweepResult] = ()) -> Check:
    """Judge-ready form of a sweep: its measurement (lowest busbw at the large sizes), its
    correctness problems and its plot series."""
    threshold = gc.thresholds.get(metric)
    measurement = measurement_of(sweep, metric, settings(gc, across=_across(metric)).judge_from_bytes, attempts)
    series = {
        "name": metric,
        "where": sweep.where,
        "x_label": "bytes",
        "x_log": True,
        "y_label": "busbw GB/s",
        "points": sweep.series_points(),
        "threshold": threshold.fail_below if threshold else None,
        "table": sweep.table(),
        "backend": sweep.backend,
        "implementation": sweep.implementation,
        "nccl_version": sweep.nccl_version,
        "env": dict(sweep.env),
        "notes": list(sweep.notes),
        "n_ranks": sweep.n_ranks,
        "iters": sweep.iters,
        "warmup_iters": sweep.warmup_iters,
        "nccl_algo": sweep.nccl_algo,
        "nccl_proto": sweep.nccl_proto,
        "transports": list(sweep.transports),
        "network": sweep.network,
    }
    return Check(
        sweep=sweep,
        metric=metric,
        threshold=threshold,
        measurement=measurement,
        problems=tuple(sweep.correctness_problems()),
        attempts=tuple(attempts) or (sweep,),
        series=series,
    )


def _with_retries(gc: GpuClusterSession, first: SweepResult, metric: str, again: Any) -> Check:
    """Re-measure a performance miss up to ``nccl.retries`` times; a wrong result stops at once."""
    attempts = [first]
    check = make_check(gc, first, metric, attempts)
    while check.fails and not check.problems and len(attempts) <= settings(gc, across=_across(metric)).retries:
        attempts.append(again())
        check = make_check(gc, attempts[-1], metric, attempts)
    return check


def intra_node(gc: GpuClusterSession, node: str, op: str) -> Check:
    """``op`` inside ``node``: every node measured at once in one job (each its own communicator),
    shared by all per-node tests of the run; a miss is re-measured on that node alone."""
    ops = tuple(gc.profile.nccl.ops)
    if op not in ops:
        ops = (*ops, op)
    sweeps = intra_node_job(gc, ops).sweeps

    def again() -> SweepResult:
        redo = run_sweeps(
            gc,
            "nccl-intra-retry",
            groups="node",
            ops=(op,),
            env=_intra_env(gc, "intra-retry"),
            nodelist=(node,) if gc.profile.executor == "slurm" else None,
        )
        return _find(redo, (node,), op)

    return _with_retries(gc, _find(sweeps, (node,), op), metric_name(gc, op, "intra_node"), again)


def intra_node_job(gc: GpuClusterSession, ops: tuple[str, ...] | None = None) -> IntraNodeRun:
    """The run's one intra-node job (the profile's collectives, or ``ops``): every node's sweeps,
    sampled by telemetry while they run, after the node probe and the compute ceilings where those
    ride along."""
    ops = tuple(gc.profile.nccl.ops) if ops is None else ops
    ceilings = ceilings_ride_along(gc)
    probe = probe_rides_along(gc)
    name = "probe-" * probe + "ceilings-" * (ceilings is not None) + "nccl-intra"
    return gc.once(
        ("nccl", "intra_node", ops),
        lambda: _run(
            gc,
            name,
            groups="node",
            ops=ops,
            nodelist=None,
            env=_intra_env(gc),
            min_bytes=None,
            corrupt_rank=None,
            sampled=True,
            ceilings=ceilings,
            probe=probe,
        ),
    )


def intra_node_telemetry(gc: GpuClusterSession) -> list[NodeTelemetry]:
    """What the telemetry sampler saw on every node while the intra-node sweeps ran (runs them
    if no test has yet): the load the telemetry checks judge is the collective workload itself."""
    return intra_node_job(gc).telemetry


def inter_node(gc: GpuClusterSession, op: str) -> Check:
    """``op`` over every tested node on one communicator on ``[nccl] inter_node_algo`` (Ring
    unless the profile says otherwise), so busbw is the network's and not inflated by tree or
    NVLS algorithms."""
    ops = tuple(gc.profile.nccl.ops)
    if op not in ops:
        ops = (*ops, op)
    nodes = tuple(gc.nodes)
    sweeps = gc.once(
        ("nccl", "inter_node", ops), lambda: run_sweeps(gc, "nccl-inter", groups="world", ops=ops, env=inter_env(gc))
    )

    def again() -> SweepResult:
        redo = run_sweeps(gc, "nccl-inter-retry", groups="world", ops=(op,), env=inter_env(gc, "inter-retry"))
        return _find(redo, nodes, op)

    return _with_retries(gc, _find(sweeps, nodes, op), metric_name(gc, op, "inter_node"), again)


def pair_passes(gc: GpuClusterSession, sweep: SweepResult, metric: str) -> bool:
    """A pair passes when its results are right and its busbw is not under the fail line."""
    check = make_check(gc, sweep, metric)
    return not check.problems and check.measurement is not None and not check.fails


def isolate_bad_nodes(gc: GpuClusterSession, check: Check) -> Check:
    """Pair the nodes (one job per round, every pair its own communicator, all at once) and
    re-pair failed ones with known-good nodes; the culprit goes into the measurement's detail."""
    op = check.sweep.op
    s = settings(gc, across=True)
    judge_from = min(s.judge_from_bytes, s.max_bytes)

    def run_round(pairs: list[Pair]) -> dict[Pair, bool]:
        sweeps = run_sweeps(
            gc,
            "nccl-pairs",
            groups=[list(p) for p in pairs],
            ops=(op,),
            env=inter_env(gc, "pairs"),
            min_bytes=judge_from,
        )
        return {p: pair_passes(gc, _find(sweeps, p, op), check.metric) for p in pairs}

    found = isolate(gc.nodes, run_round)
    measurement = check.measurement
    if measurement is not None:
        measurement = dataclasses.replace(measurement, detail=f"{measurement.detail}; isolation: {found.summary()}")
    return dataclasses.replace(check, isolation=found, measurement=measurement)

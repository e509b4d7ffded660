"""Judging a collective: a sweep turned into the measurement a verdict uses, its correctness
problems and its plot series, and the decisions taken on it (re-measure, narrow down by pairs).

Rules kept here: a wrong result is never retried and fails whatever its speed; a slow one is
re-measured up to ``nccl.retries`` times; the verdict uses the lowest busbw over the sizes
≥ ``nccl.judge_from_bytes``, never the sweep average. Running the sweeps, the retries and the
rounds of pairs is ``run/areas/nccl.py``; the sweep's arithmetic is ``workloads/busbw.py``.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from pytest_gpucluster.checks.busbw import describe_judged
from pytest_gpucluster.checks.pairing import Isolation
from pytest_gpucluster.checks.rounds import RoundsCheck
from pytest_gpucluster.config import NVLS_COLLECTIVES, NcclSettings, Threshold
from pytest_gpucluster.errors import GpuClusterError
from pytest_gpucluster.verdict import Finding, Measurement, Verdict, judge
from pytest_gpucluster.workloads.busbw import SweepResult


@dataclass(frozen=True)
class Check:
    """One collective on one communicator, judged: its measurement's verdict is made once, here,
    and every decision (re-measure, narrow down) and the test's record read that one verdict."""

    sweep: SweepResult
    metric: str
    threshold: Threshold | None
    measurement: Measurement | None
    problems: tuple[Finding, ...]  # wrong results: fail, never retried
    attempts: tuple[SweepResult, ...] = ()
    isolation: Isolation | None = None
    series: dict[str, Any] = field(default_factory=dict)
    rounds: RoundsCheck | None = None  # across nodes over the switch tree: every group, what they name

    @functools.cached_property
    def verdict(self) -> Verdict | None:
        """The measurement against its bound; None without a bound (the check could not judge)
        or without a measurement."""
        if self.measurement is None or self.threshold is None:
            return None
        return judge(self.measurement, self.threshold)

    @property
    def fails(self) -> bool:
        """The measurement is under its fail line (correctness is judged separately)."""
        return self.verdict is not None and self.verdict.status == "fail"


def metric_name(op: str, scope: str, *, nvls: bool) -> str:
    """``nccl.<op>.<scope>``; inside a node with NVLS allowed (``[nccl] nvls``), ``intra_node_nvls``
    for the collectives NCCL can run on NVLS, so they are never judged by an NVLS-off line."""
    if scope == "intra_node" and nvls and op in NVLS_COLLECTIVES:
        return f"nccl.{op}.intra_node_nvls"
    return f"nccl.{op}.{scope}"


def is_across(metric: str) -> bool:
    """Whether ``metric`` judges a collective across nodes (``[nccl_across]``'s settings)."""
    return metric.endswith(".inter_node")


def find(sweeps: Sequence[SweepResult], nodes: Sequence[str], op: str) -> SweepResult:
    """The sweep of ``op`` over exactly ``nodes``; the error names the nodes results came from."""
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
    if len(sweep.nodes) == 1:
        return Measurement.at(metric, row.busbw, "GB/s", sweep.nodes[0], detail=detail)
    return Measurement.across(metric, row.busbw, "GB/s", sweep.nodes, detail=detail)


def make_check(
    sweep: SweepResult,
    metric: str,
    threshold: Threshold | None,
    settings: NcclSettings,
    attempts: Sequence[SweepResult] = (),
) -> Check:
    """Judge-ready form of a sweep: its measurement (lowest busbw at ``settings``' large sizes),
    its correctness problems and its plot series."""
    measurement = measurement_of(sweep, metric, settings.judge_from_bytes, attempts)
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
    if sweep.nics:  # which NIC and port every GPU's network channels went through (NCCL's log)
        series["nics"] = [dataclasses.asdict(g) for g in sweep.nics]
    return Check(
        sweep=sweep,
        metric=metric,
        threshold=threshold,
        measurement=measurement,
        problems=tuple(_wrong_results(sweep)),
        attempts=tuple(attempts) or (sweep,),
        series=series,
    )


def unmeasured(op: str, nodes: Sequence[str], metric: str, threshold: Threshold | None) -> Check:
    """``op`` over ``nodes`` with no measurement (its job ended with a node lost): no verdict, no
    series, no wrong result; what ended it is said by the findings it is recorded with."""
    sweep = SweepResult(op, tuple(nodes), n_ranks=0, backend="", implementation="", rows=(), warmup_iters=0, iters=0)
    return Check(sweep=sweep, metric=metric, threshold=threshold, measurement=None, problems=(), attempts=())


def _wrong_results(sweep: SweepResult) -> list[Finding]:
    """A sweep's wrong results: of its node, or of its nodes together (a collective across nodes
    returns one result; which node corrupted it, the result cannot say)."""
    if len(sweep.nodes) == 1:
        return [Finding.on_node(sweep.nodes[0], p) for p in sweep.correctness_problems()]
    return [Finding.across(sweep.nodes, p) for p in sweep.correctness_problems()]


def needs_retry(check: Check, attempts: int, retries: int) -> bool:
    """Whether to measure again after ``attempts`` sweeps: a performance miss, with results right,
    and fewer than ``retries`` re-measurements so far. A wrong result stops at once."""
    return check.fails and not check.problems and attempts <= retries


def needs_isolation(check: Check) -> bool:
    """Whether to narrow a miss across nodes down by pairs: results right, busbw still failing."""
    return check.fails and not check.problems


def pair_passes(check: Check) -> bool:
    """A pair passes when its results are right and its busbw is not under the fail line."""
    return not check.problems and check.measurement is not None and not check.fails


def with_rounds(check: Check, found: RoundsCheck) -> Check:
    """``check`` (the whole-cluster round) with what the rounds over the switch tree named: the
    nodes they convict as the measurement's culprits (a switch or link convicts none)."""
    measurement = check.measurement
    if measurement is not None:
        convicted = tuple(n for f in found.findings for n in f.convicts)
        measurement = dataclasses.replace(measurement, culprits=convicted)
    return dataclasses.replace(check, rounds=found, measurement=measurement)


def with_isolation(check: Check, found: Isolation) -> Check:
    """``check`` with what the rounds of pairs established: the bad nodes as the measurement's
    culprits, and what was tried in its detail."""
    measurement = check.measurement
    if measurement is not None:
        measurement = dataclasses.replace(
            measurement, detail=f"{measurement.detail}; isolation: {found.summary()}", culprits=found.bad
        )
    return dataclasses.replace(check, isolation=found, measurement=measurement)

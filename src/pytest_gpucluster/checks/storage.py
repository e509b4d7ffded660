"""Storage, judged on the login node: the ``StorageReport`` of every node
(``workloads.storage.measure_node``) against the lines of thresholds.toml, each shortfall put on
whoever is at fault.

The attribution rule for a rate every node measured at once (write, read, metadata operations):

* a node under ``storage.fraction_of_node_median`` of its peers' median is slow on its own
  account: the finding is that node's, naming it and its mount;
* of the other nodes, when every one is past the rate's line, the shared filesystem is slow for
  all alike: one finding of the shared filesystem (scope ``shared_fs``), convicting no node;
* otherwise a node past the line while its peers meet it is that node's;
* a line the site has not set is a warning asking for it (never a silent pass); the value is kept
  unjudged for ``--gpucluster-calibrate``.

The sum over the nodes, measured at once, against its own line is the shared filesystem's alone.

A node that gave up waiting for another at one of the job's barriers measured nothing after it:
what it could not measure is not judged, never its failure, and the nodes it waited for are named
as the cause (``waited``).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from pytest_gpucluster.checks import lines
from pytest_gpucluster.config import ThresholdSet
from pytest_gpucluster.verdict import Finding, Measurement, Verdict, judge
from pytest_gpucluster.verdict.finding import Severity
from pytest_gpucluster.workloads.storage import BARRIERS, GaveUp, StorageReport

FRACTION = "storage.fraction_of_node_median"


def worst(verdicts: Sequence[Verdict]) -> Severity:
    """``fail`` where any verdict fails, else ``warn``."""
    return "fail" if any(v.status == "fail" for v in verdicts) else "warn"


@dataclass(frozen=True)
class Judged:
    """What a storage check decided: the verdicts of measurements judged against a line, the
    measurements no line judged, and the findings, each on whoever is at fault."""

    verdicts: tuple[Verdict, ...] = ()
    unjudged: tuple[Measurement, ...] = ()
    findings: tuple[Finding, ...] = ()

    def __add__(self, other: Judged) -> Judged:
        return Judged(self.verdicts + other.verdicts, self.unjudged + other.unjudged, self.findings + other.findings)


@dataclass
class _Acc:
    verdicts: list[Verdict] = field(default_factory=list)
    unjudged: list[Measurement] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)

    def done(self) -> Judged:
        return Judged(tuple(self.verdicts), tuple(self.unjudged), tuple(self.findings))


def mount_of(reports: Sequence[StorageReport]) -> Callable[[str], str]:
    """node → ``its mount`` as the node described it."""
    mounts = {r.node: r.mount.describe() if r.mount else r.path for r in reports}
    return lambda node: mounts.get(node, "?")


def missing_line(thresholds: ThresholdSet, metric: str, nodes: Sequence[str]) -> Finding:
    """The warning for a storage line the site has not set: what to add, where."""
    return lines.missing_line(thresholds, metric, nodes, "docs/storage.md says what peers sustain")


def rate(
    values: Mapping[str, float],
    metric: str,
    unit: str,
    thresholds: ThresholdSet,
    *,
    what: str,
    where: Callable[[str], str],
    job_id: str = "",
) -> Judged:
    """Judge one rate every node measured at once (``values``: node → rate) by the module's rule.
    ``what``: the rate in words ("writes"); ``where``: a node's mount, said with its findings."""
    acc = _Acc()
    nodes = list(values)
    slow = _off_peers(values, metric, unit, thresholds, acc, what=what, where=where, job_id=job_id)
    line = thresholds.get(metric)
    measured = [Measurement.at(metric, v, unit, n, detail=where(n), job_id=job_id) for n, v in values.items()]
    if line is None:
        acc.unjudged += measured
        acc.findings.append(missing_line(thresholds, metric, nodes))
        return acc.done()
    verdicts = [judge(m, line) for m in measured]
    acc.verdicts += verdicts
    rest = [v for v in verdicts if v.measurement.nodes[0] not in slow]
    past = [v for v in rest if v.status in ("fail", "warn")]
    if past and len(past) == len(rest):
        severity = worst(past)
        said = ", ".join(f"{v.measurement.nodes[0]} {v.measurement.value:.4g} {unit}" for v in past)
        acc.findings.append(
            Finding.outside(
                "shared_fs",
                f"the shared filesystem ({where(nodes[0])}): every node {what} past the line alike "
                f"({said}; {line.describe()}; {line.evidence or line.source}); no node is at fault",
                nodes=[v.measurement.nodes[0] for v in past],
                severity=severity,
            )
        )
    else:
        acc.findings += [f for v in past if (f := v.finding()) is not None]
    return acc.done()


class PerGpu(NamedTuple):
    """One GPU's value (a stream per GPU, a checkpoint shard): its node, its GPU index where it
    has one, how a reader names it (``node1:gpu3``, ``node1 stream 3``) and what else to say."""

    node: str
    gpu: int | None
    label: str
    value: float
    detail: str = ""


def per_gpu(
    values: Sequence[PerGpu], metric: str, unit: str, thresholds: ThresholdSet, *, what: str, where: str, job_id: str
) -> Judged:
    """Each GPU's value against the line: every GPU of more than one node past it alike is the
    shared filesystem's (``where`` names it), otherwise each GPU past it is its node's."""
    nodes = sorted({v.node for v in values})
    measured = [
        Measurement.at(metric, v.value, unit, v.node, gpu=v.gpu, detail=f"{v.label}: {v.detail}", job_id=job_id)
        for v in values
    ]
    line = thresholds.get(metric)
    if line is None:
        return Judged(unjudged=tuple(measured), findings=(missing_line(thresholds, metric, nodes),))
    verdicts = [judge(m, line) for m in measured]
    past = [v for v in verdicts if v.status in ("fail", "warn")]
    if past and len(past) == len(verdicts) and len(nodes) > 1:
        said = ", ".join(f"{v.label} {v.value:.4g} {unit}" for v in values)
        found = Finding.outside(
            "shared_fs",
            f"the shared filesystem ({where}): every GPU {what} past the line alike "
            f"({said}; {line.describe()}; {line.evidence or line.source}); no node is at fault",
            nodes=nodes,
            severity=worst(past),
        )
        return Judged(tuple(verdicts), findings=(found,))
    return Judged(tuple(verdicts), findings=tuple(f for v in past if (f := v.finding()) is not None))


def _off_peers(
    values: Mapping[str, float],
    metric: str,
    unit: str,
    thresholds: ThresholdSet,
    acc: _Acc,
    *,
    what: str,
    where: Callable[[str], str],
    job_id: str,
) -> set[str]:
    """The nodes under ``storage.fraction_of_node_median`` of their peers' median (each judged,
    and a failure found on the node, naming its mount); needs two nodes or more."""
    if len(values) < 2:
        return set()
    line = thresholds.get(FRACTION)
    slow: set[str] = set()
    for node, value in values.items():
        peers = statistics.median(v for n, v in values.items() if n != node)
        if peers <= 0:
            continue
        m = Measurement.at(
            FRACTION, value / peers, "ratio", node, detail=f"{metric}, peers' median {peers:.4g} {unit}", job_id=job_id
        )
        if line is None:
            acc.unjudged.append(m)
            continue
        verdict = judge(m, line)
        acc.verdicts.append(verdict)
        if verdict.status in ("fail", "warn"):
            acc.findings.append(
                Finding.on_node(
                    node,
                    f"{node}: {what} {value:.4g} {unit} on {where(node)}, {value / peers:.2f} of its peers' median "
                    f"{peers:.4g} {unit} ({line.describe()}; {line.evidence or line.source})",
                    severity=verdict.status,
                    metric=FRACTION,
                    value=value / peers,
                    unit="ratio",
                    job_id=job_id,
                )
            )
            if verdict.status == "fail":
                slow.add(node)
    if line is None:
        acc.findings.append(missing_line(thresholds, FRACTION, list(values)))
    return slow


def aggregate(
    values: Mapping[str, float], metric: str, unit: str, thresholds: ThresholdSet, *, what: str, job_id: str = ""
) -> Judged:
    """The nodes' rates summed (measured at once) against the aggregate line: a shortfall is the
    shared filesystem's, on no node."""
    nodes = list(values)
    m = Measurement.across(
        metric, sum(values.values()), unit, nodes, detail=f"{len(nodes)} node(s) at once", job_id=job_id
    )
    return shared_fs_line(m, thresholds, nodes, what)


def shared_fs_line(m: Measurement, thresholds: ThresholdSet, nodes: Sequence[str], what: str) -> Judged:
    """A figure of every node at once against its line: a shortfall is the shared filesystem's,
    on no node; without a line, the figure is kept and the line asked for."""
    line = thresholds.get(m.metric)
    if line is None:
        return Judged(unjudged=(m,), findings=(missing_line(thresholds, m.metric, nodes),))
    verdict = judge(m, line)
    if verdict.status not in ("fail", "warn"):
        return Judged(verdicts=(verdict,))
    found = Finding.outside(
        "shared_fs", f"the shared filesystem: {what} {verdict.sentence}", nodes=nodes, severity=verdict.status
    )
    return Judged(verdicts=(verdict,), findings=(found,))


def _order(barrier: str) -> int:
    return BARRIERS.index(barrier) if barrier in BARRIERS else len(BARRIERS)


def stopped_before(r: StorageReport, barrier: str) -> GaveUp | None:
    """Where ``r``'s node gave up waiting at ``barrier`` or an earlier one, so that the phase
    after ``barrier`` never ran there: that wait; else None."""
    g = r.barrier_timeout
    return g if g is not None and _order(g.barrier) <= _order(barrier) else None


def _gave_ups(r: StorageReport) -> list[GaveUp]:
    found = [
        r.barrier_timeout,
        r.lock.gave_up if r.lock else None,
        r.flock.gave_up if r.flock else None,
        r.large_dir.gave_up if r.large_dir else None,
    ]
    return [g for g in found if g is not None]


def waited(node: str, gave_up: GaveUp, reports: Sequence[StorageReport], what: str, job_id: str = "") -> Finding:
    """``node``'s ``what`` not measured, for it gave up waiting at a barrier: not judged, never a
    failure of the node that waited. The culprits are the nodes it waited for; where one of those
    had itself given up at an earlier barrier (and so never came), the nodes that one waited for,
    and so on. A node is named from its report (by rank), else from the job's host names."""
    by_rank = {r.rank: r for r in reports}
    culprits: dict[str, None] = {}
    roots: list[tuple[str, GaveUp]] = []  # the waits that name a culprit directly
    queue, seen = [(node, gave_up)], set()
    while queue:
        waiter, g = queue.pop(0)
        if waiter in seen:
            continue
        seen.add(waiter)
        direct = []
        for i, rank in enumerate(g.missing):
            other = by_rank.get(rank)
            earlier = [e for e in _gave_ups(other) if _order(e.barrier) < _order(g.barrier)] if other else []
            if other is not None and earlier:
                queue.append((other.node, min(earlier, key=lambda e: _order(e.barrier))))
            else:
                direct.append(other.node if other else g.nodes[i] if i < len(g.nodes) else f"rank {rank}")
        if direct:
            culprits.update(dict.fromkeys(direct))
            roots.append((waiter, g))
    if not roots:  # each node it waited for had left, waiting in turn for one that had left
        text = (
            f"{node}: gave up at barrier {gave_up.barrier} after {gave_up.waited_s:.0f} s, every node it waited for "
            f"having left after a wait of its own: its {what} not measured"
        )
        return Finding.across([node], text, severity="not_judged", job_id=job_id)
    first = roots[0][1]
    waiters = [w for w, g in roots if g.barrier == first.barrier]
    text = (
        f"{', '.join(culprits)}: not at barrier {first.barrier} within {first.waited_s:.0f} s, "
        f"where {', '.join(waiters)} gave up waiting"
    )
    if (node, gave_up) not in roots:
        text += f" and left; {node} then gave up at barrier {gave_up.barrier}"
    return Finding.across(
        [*culprits, node],
        f"{text}: {node}'s {what} not measured",
        culprits=culprits,
        severity="not_judged",
        job_id=job_id,
    )


def no_room(r: StorageReport, what: str) -> Finding:
    """``r``'s node measured no ``what``: the job's files would have taken too much of the shared
    filesystem's free space or free inodes (``r.not_measured`` says which, naming the mount). Not
    judged, and the filesystem's: no node is at fault."""
    return Finding.outside(
        "shared_fs", f"{r.node}: {what} not measured: {r.not_measured}", nodes=[r.node], severity="not_judged"
    )


def not_measured(reports: Sequence[StorageReport], nodes: Sequence[str]) -> list[Finding]:
    """Why some node's stream was not measured (never a silent pass): no report, too little free
    space or too few free inodes (the filesystem's, not judged), an error on the node, or a
    barrier it gave up waiting at before the streams (not judged, the nodes it waited for
    named)."""
    found = [
        Finding.on_node(n, f"{n}: sent no report from the storage job")
        for n in nodes
        if n not in {r.node for r in reports}
    ]
    for r in reports:
        if r.stream is None and (r.short_of_space or r.short_of_inodes):
            found.append(no_room(r, "write and read streams"))
        elif r.stream is None and (gave_up := stopped_before(r, "streams")) is not None:
            found.append(waited(r.node, gave_up, reports, "write and read streams"))
        elif r.stream is None:
            found.append(
                Finding.on_node(r.node, f"{r.node}: {r.not_measured or '; '.join(r.errors) or 'not measured'}")
            )
        elif not r.stream.verified:
            found.append(
                Finding.on_node(r.node, f"{r.node}: the blocks it read back of its own file are not those it wrote")
            )
    return found


def throughput(reports: Sequence[StorageReport], nodes: Sequence[str], thresholds: ThresholdSet, job_id: str) -> Judged:
    """Every node's write and read-back rates: each stream's (one per GPU) against the per-GPU
    line, each node's streams together by the module's rule, and the nodes' summed."""
    where = mount_of(reports)
    streams = {r.node: r.stream for r in reports if r.stream is not None and r.stream.verified}
    judged = Judged(findings=tuple(not_measured(reports, nodes)))
    for way in ("write", "read"):
        values = {n: s.write_mb_s if way == "write" else s.read_mb_s for n, s in streams.items()}
        if not values:
            continue
        each = [
            PerGpu(
                n,
                None,
                f"{n} stream {i}",
                one.write_mb_s if way == "write" else one.read_mb_s,
                f"{one.size_bytes / 1e6:.4g} MB in {one.write_s if way == 'write' else one.read_s:.3g} s, "
                f"{len(s.each)} at once, {s.tool}, {s.mode}",
            )
            for n, s in streams.items()
            for i, one in enumerate(s.each)
        ]
        judged += per_gpu(
            each,
            f"storage.{way}_per_gpu",
            "MB/s",
            thresholds,
            what=f"{way}s its stream",
            where=where(next(iter(values))),
            job_id=job_id,
        )
        judged += rate(
            values, f"storage.{way}_per_node", "MB/s", thresholds, what=f"{way}s", where=where, job_id=job_id
        )
        judged += aggregate(values, f"storage.{way}_aggregate", "MB/s", thresholds, what=f"{way}s", job_id=job_id)
    return judged


def metadata(reports: Sequence[StorageReport], nodes: Sequence[str], thresholds: ThresholdSet, job_id: str) -> Judged:
    """Every node's small-file creates, stats and unlinks per second, by the module's rule, and
    the nodes' rates summed (measured at once) against ``storage.metadata_aggregate``."""
    values = {r.node: r.metadata_ops_s for r in reports if r.metadata_files}
    by_node = {r.node: r for r in reports}
    found = []
    for n in (n for n in nodes if n not in values):
        r = by_node.get(n)
        if r is not None and r.short_of_inodes:
            found.append(no_room(r, "metadata rate"))
        elif r is not None and (gave_up := stopped_before(r, "metadata")) is not None:
            found.append(waited(n, gave_up, reports, "metadata rate", job_id))
        else:
            said = "; ".join(r.errors) if r is not None else ""
            found.append(Finding.on_node(n, f"{n}: measured no metadata rate ({said or 'no report'})"))
    judged = Judged(findings=tuple(found))
    if values:
        judged += rate(
            values,
            "storage.metadata_ops",
            "ops/s",
            thresholds,
            what="creates/stats/unlinks",
            where=mount_of(reports),
            job_id=job_id,
        )
        judged += aggregate(
            values, "storage.metadata_aggregate", "ops/s", thresholds, what="creates/stats/unlinks", job_id=job_id
        )
    return judged


def cold_import(reports: Sequence[StorageReport], thresholds: ThresholdSet, job_id: str) -> Judged:
    """Every node's cold import of the framework, all nodes at once, against its line: slow on
    every node alike is the run's environment's (scope ``environment``), slow on some its nodes'."""
    found = [Finding.on_node(r.node, f"{r.node}: {r.import_error}") for r in reports if r.import_error]
    found += [
        waited(r.node, gave_up, reports, "cold import", job_id)
        for r in reports
        if r.import_s is None and not r.import_error and (gave_up := stopped_before(r, "start")) is not None
    ]
    values = {r.node: r.import_s for r in reports if r.import_s is not None}
    where = {r.node: f"import {r.import_module} by {r.python} on {r.python_mount or '?'}" for r in reports}
    judged = Judged(findings=tuple(found))
    if not values:
        return judged
    line = thresholds.get("storage.cold_import")
    measured = [
        Measurement.at("storage.cold_import", v, "s", n, detail=where[n], job_id=job_id) for n, v in values.items()
    ]
    if line is None:
        return judged + Judged(
            unjudged=tuple(measured), findings=(missing_line(thresholds, "storage.cold_import", list(values)),)
        )
    verdicts = [judge(m, line) for m in measured]
    past = [v for v in verdicts if v.status in ("fail", "warn")]
    if past and len(past) == len(verdicts) and len(verdicts) > 1:
        severity = worst(past)
        said = "; ".join(v.sentence for v in past)
        return judged + Judged(
            tuple(verdicts),
            findings=(
                Finding.outside(
                    "environment", f"every node imports slowly alike: {said}", nodes=list(values), severity=severity
                ),
            ),
        )
    return judged + Judged(tuple(verdicts), findings=tuple(f for v in past if (f := v.finding()) is not None))


def section(reports: Sequence[StorageReport]) -> dict[str, Any]:
    """What each node measured, for the results (``storage`` on each storage test): the tool, the
    streams' mode (O_DIRECT or the page cache dropped), the node's rates and each stream's, the
    mount and its options, the large directory (its writer's and its lister's figures)."""
    nodes: dict[str, Any] = {}
    for r in reports:
        s = r.stream
        nodes[r.node] = {
            "tool": r.tool,
            "mount": r.mount.describe() if r.mount else None,
            "options": list(r.mount.options) if r.mount else [],
            "mode": s.mode if s else None,
            "bytes": s.size_bytes if s else 0,
            "block_bytes": s.block_bytes if s else 0,
            "streams": len(s.each) if s else 0,
            "write_mb_s": round(s.write_mb_s, 1) if s else None,
            "read_mb_s": round(s.read_mb_s, 1) if s else None,
            "write_mb_s_per_stream": [round(one.write_mb_s, 1) for one in s.each] if s else [],
            "read_mb_s_per_stream": [round(one.read_mb_s, 1) for one in s.each] if s else [],
            "not_measured": r.not_measured,
            "free_inodes": r.free_inodes,
            "metadata_ops_s": round(r.metadata_ops_s, 1) if r.metadata_files else None,
            "metadata_phase_ops_s": _phase_rates(r),
            "round_trips_ms": [round(t * 1e3, 2) for t in r.round_trips_s],
            "renamed_round_trips_ms": [round(t * 1e3, 2) for t in r.renamed.trips] if r.renamed else [],
            "renamed_missed": r.renamed.missed if r.renamed else None,
            "renamed_short": r.renamed.incomplete if r.renamed else None,
            "peer": r.peer,
            "import_s": r.import_s,
            "import_module": r.import_module,
            "python": r.python,
        }
        if r.large_dir is not None and r.large_dir.writer:
            nodes[r.node]["large_dir_files"] = r.large_dir.files
            nodes[r.node]["large_dir_create_s"] = round(r.large_dir.create_s, 3)
        if r.large_dir is not None and r.large_dir.listed is not None:
            nodes[r.node]["large_dir_listed"] = r.large_dir.listed
            nodes[r.node]["large_dir_list_s"] = round(r.large_dir.list_s, 3)
    return {"nodes": nodes}


def _phase_rates(r: StorageReport) -> dict[str, float]:
    """The node's creates, stats and unlinks per second, each phase on its own."""
    if not r.metadata_files:
        return {}
    phases = zip(("create", "stat", "unlink"), r.metadata_s, strict=True)
    return {name: round(r.metadata_files / s, 1) for name, s in phases if s > 0}

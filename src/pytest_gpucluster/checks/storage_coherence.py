"""Storage across nodes, judged on the login node: the mounts compared between nodes, how soon a file
one node writes is seen by another (``workloads.storage_coherence.ping_pong``), and the locks held
across nodes (a POSIX record lock and a ``flock``). What every node sees alike is the shared
filesystem's; what one node sees apart from its peers is that node's. A node without a result for a
phase is named in a finding, never passed over: not judged where it gave up waiting for another node
at a barrier (``checks.storage.waited`` names the node it waited for).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from pytest_gpucluster.checks.places import off_majority
from pytest_gpucluster.checks.storage import (
    Judged,
    missing_line,
    mount_of,
    no_room,
    stopped_before,
    waited,
    worst,
)
from pytest_gpucluster.config import ThresholdSet
from pytest_gpucluster.verdict import Finding, Measurement, Verdict, judge
from pytest_gpucluster.workloads.storage import MountFacts, StorageReport
from pytest_gpucluster.workloads.storage_coherence import LOCK_KINDS, LockResult, RoundTrips

# Mount options that name the client itself and so differ between healthy nodes.
PER_CLIENT_OPTIONS = ("clientaddr=",)


def _compared(mount: MountFacts) -> tuple[str, str, tuple[str, ...]]:
    options = tuple(o for o in mount.options if not o.startswith(PER_CLIENT_OPTIONS))
    return mount.fstype, mount.source, options


def mount_findings(reports: Sequence[StorageReport]) -> list[Finding]:
    """Every node mounts the shared filesystem alike (type, source, options): the nodes that
    differ from a strict majority are named with what differs; with no majority, all together."""
    seen = {r.node: _compared(r.mount) for r in reports if r.mount is not None}
    found = [
        Finding.on_node(r.node, f"{r.node}: {r.path} is on no mount it can read") for r in reports if r.mount is None
    ]
    if len(set(seen.values())) < 2:
        return found
    odd = off_majority(seen)
    if odd:
        common = next(v for n, v in seen.items() if n not in odd)
        for n in odd:
            found.append(Finding.on_node(n, f"{n}: mounts the shared filesystem {_differs(seen[n], common)}"))
        return found
    said = "; ".join(f"{n}: {fstype} {source} ({','.join(opts)})" for n, (fstype, source, opts) in seen.items())
    return [
        *found,
        Finding.across(list(seen), f"the nodes mount the shared filesystem differently, none in a majority: {said}"),
    ]


def _differs(mine: tuple[str, str, tuple[str, ...]], common: tuple[str, str, tuple[str, ...]]) -> str:
    parts = []
    if mine[0] != common[0] or mine[1] != common[1]:
        parts.append(f"as {mine[0]} {mine[1]} where its peers mount {common[0]} {common[1]}")
    extra = sorted(set(mine[2]) - set(common[2]))
    lacking = sorted(set(common[2]) - set(mine[2]))
    if extra or lacking:
        parts.append(
            "with options other than its peers'"
            + (f": {','.join(extra)} it alone has" if extra else "")
            + (f"; lacking {','.join(lacking)}" if lacking else "")
        )
    return "; ".join(parts)


WRITTEN = "storage.visibility_round_trip"
RENAMED = "storage.renamed_visibility_round_trip"


def trips_of(r: StorageReport, renamed: bool) -> RoundTrips | None:
    """``r``'s round trips with written files (``renamed`` false) or renamed ones; None where its
    node had none."""
    if renamed:
        return r.renamed
    return RoundTrips(r.round_trips_s, r.round_trips_missed) if r.peer else None


def visibility(
    reports: Sequence[StorageReport], thresholds: ThresholdSet, job_id: str, *, renamed: bool = False
) -> Judged:
    """Each node's slowest round trip to its neighbour against the line (``renamed``: with files
    renamed into place, against ``storage.renamed_visibility_round_trip``); a try never answered,
    or a renamed file seen short, fails the pair. Every pair past the line is the shared
    filesystem's. Of three nodes or more, pairs past it that all hold one node, while a pair
    without it meets the line, are that node's (its client sees the others' files late, or shows
    its own late: in the ring of pings it is in both its pairs, as pinger and as the one pinged);
    other pairs past it are those pairs' (either node's view may be late: no culprit)."""
    metric, files = (RENAMED, "renamed files") if renamed else (WRITTEN, "files")
    what = "renamed round trips" if renamed else "round trips"
    barrier = "renamed" if renamed else "visibility"
    got = {r.node: trips_of(r, renamed) for r in reports}
    found = _no_result(reports, [r for r in reports if got[r.node] is None], barrier, what, job_id)
    pairs = [(r, t) for r in reports if (t := got[r.node]) is not None]
    if not pairs:
        return Judged(findings=tuple(found))
    where = mount_of(reports)
    line = thresholds.get(metric)
    measured = []
    for r, t in pairs:
        trips = sorted(t.trips)
        slowest = float("inf") if t.missed or t.incomplete else (trips[-1] if trips else float("nan"))
        spread = (
            f"{len(trips)} round trips, median {statistics.median(trips) * 1e3:.1f} ms, max {trips[-1] * 1e3:.1f} ms"
            if trips
            else "no round trip"
        )
        if t.missed:
            spread += f", {t.missed} never answered"
        if t.incomplete:
            spread += f", {t.incomplete} seen under the new name but short"
        measured.append(
            Measurement.across(
                metric, slowest, "s", [r.node, r.peer], detail=f"{spread}; {where(r.node)}", job_id=job_id
            )
        )
    if line is None:
        return Judged(
            unjudged=tuple(measured),
            findings=(*found, missing_line(thresholds, metric, [r.node for r, _ in pairs])),
        )
    verdicts = [judge(m, line) for m in measured]
    past = [v for v in verdicts if v.status in ("fail", "warn")]
    if past and len(past) == len(verdicts) and len(reports) > 2:
        severity = worst(past)
        text = f"the shared filesystem: every node's {files} reach its neighbour late: " + "; ".join(
            v.sentence for v in past
        )
        found.append(Finding.outside("shared_fs", text, nodes=[r.node for r, _ in pairs], severity=severity))
    elif (one := _common_node(past, verdicts)) is not None and len(reports) > 2:
        said = "; ".join(v.sentence for v in past)
        text = (
            f"{one}: every late pair holds it and a pair without it is not late, so its view of "
            f"{where(one)} is late (its client's caching, or its mount's options): {said}"
        )
        found.append(Finding.on_node(one, text, severity=worst(past), metric=line.metric, job_id=job_id))
    else:
        found += [f for v in past if (f := v.finding()) is not None]
    return Judged(tuple(verdicts), findings=tuple(found))


def _no_result(
    reports: Sequence[StorageReport], without: Sequence[StorageReport], barrier: str, what: str, job_id: str = ""
) -> list[Finding]:
    """A not-judged finding for each report in ``without`` (no result for the phase that opens at
    ``barrier``): where its node wrote nothing for too few free inodes, the filesystem's; where
    it gave up waiting at that barrier or before, naming the nodes it waited for; otherwise, where
    the job had more than one node, saying it has none."""
    found = []
    for r in without:
        if r.short_of_inodes:
            found.append(no_room(r, what))
        elif (gave_up := stopped_before(r, barrier)) is not None:
            found.append(waited(r.node, gave_up, reports, what, job_id))
        elif len(reports) > 1:
            why = "; ".join(r.errors) or "no reason given"
            found.append(Finding.across([r.node], f"{r.node}: has no {what} ({why})", severity="not_judged"))
    return found


def _common_node(past: Sequence[Verdict], verdicts: Sequence[Verdict]) -> str | None:
    """The one node every late pair holds, where a pair without it is not late; else None."""
    common = set.intersection(*(set(v.measurement.nodes) for v in past)) if past else set()
    if len(common) != 1:
        return None
    (node,) = common
    clear = [v for v in verdicts if v not in past and node not in v.measurement.nodes]
    return node if clear else None


# How a finding names each kind of lock.
LOCK_NAMES = {"lockf": "POSIX record locks (fcntl/lockf)", "flock": "flock locks"}


def lock_of(r: StorageReport, kind: str) -> LockResult | None:
    """``r``'s result for one kind of lock."""
    return r.flock if kind == "flock" else r.lock


def lock_findings(reports: Sequence[StorageReport]) -> list[Finding]:
    """For each kind of lock tried (``LOCK_KINDS``: a POSIX record lock and a ``flock``, which an
    NFS mount may share differently): the lock rank 0 held kept every other node out, and each
    took it once let go. Where no node was kept out, the filesystem does not share that kind
    (``nolock``, ``local_lock``): its finding; where only some were, theirs."""
    found: list[Finding] = []
    for kind in LOCK_KINDS:
        found += _lock_findings(reports, kind)
    return found


def _lock_findings(reports: Sequence[StorageReport], kind: str) -> list[Finding]:
    said = LOCK_NAMES.get(kind, kind)
    found = _no_result(reports, [r for r in reports if lock_of(r, kind) is None], "renamed", f"{kind} check")
    results = {r.node: got for r in reports if (got := lock_of(r, kind)) is not None}
    found += [waited(n, got.gave_up, reports, f"{kind} check") for n, got in results.items() if got.gave_up]
    holder = next((n for n, got in results.items() if got.holder), None)
    others = [n for n, got in results.items() if not got.holder]
    if holder is None or not others:
        return found
    where = mount_of(reports)
    found += [
        Finding.across(
            dict.fromkeys([holder, n]), f"{n}: {kind} check not finished: {results[n].error}", severity="not_judged"
        )
        for n in [holder, *others]
        if results[n].error and not results[n].gave_up
    ]
    if results[holder].error:  # a lock never held let the others in by no fault of theirs
        return found
    let_in = [n for n in others if results[n].kept_out is False]
    stuck = [n for n in others if results[n].taken_after is False]
    if let_in and len(let_in) == len(others):
        found.append(
            Finding.outside(
                "shared_fs",
                f"the shared filesystem ({where(holder)}) does not share {said} across nodes: "
                f"{', '.join(let_in)} took the {kind} lock {holder} held",
                nodes=[holder, *let_in],
            )
        )
    else:
        found += [Finding.on_node(n, f"{n}: took the {kind} lock {holder} held on {where(n)}") for n in let_in]
    found += [
        Finding.across([holder, n], f"{n}: could not take the {kind} lock after {holder} let go of it on {where(n)}")
        for n in stuck
    ]
    return found


def locks_tried(reports: Sequence[StorageReport]) -> dict[str, dict[str, str]]:
    """For the results: each kind of lock tried and what each node did with it (node → kind →
    "held it", "kept out, then took it", "let in", ...)."""
    tried: dict[str, dict[str, str]] = {}
    for kind in LOCK_KINDS:
        for r in reports:
            got = lock_of(r, kind)
            if got is None:
                continue
            if got.error:
                did = f"not finished: {got.error}"
            elif got.holder:
                did = "held it while the others tried"
            else:
                did = "kept out" if got.kept_out else "let in"
                did += ", then took it" if got.taken_after else ", then could not take it"
            tried.setdefault(r.node, {})[kind] = did
    return tried


def large_directory(reports: Sequence[StorageReport], thresholds: ThresholdSet, job_id: str) -> Judged:
    """The directory of many files one node wrote, as another node lists it: the count must
    match (a fail of the pair, no culprit: either node's view may be wrong), and the seconds to
    list it against ``storage.large_dir_list``."""
    found = _no_result(reports, [r for r in reports if r.large_dir is None], "large-dir", "large directory", job_id)
    found += [
        waited(r.node, r.large_dir.gave_up, reports, "large directory", job_id)
        for r in reports
        if r.large_dir and r.large_dir.gave_up
    ]
    writer = next((r for r in reports if r.large_dir is not None and r.large_dir.writer), None)
    lister = next((r for r in reports if r.large_dir is not None and r.large_dir.listed is not None), None)
    if writer is None or writer.large_dir is None:
        return Judged(findings=tuple(found))
    wrote = writer.large_dir
    pair = [writer.node] + ([lister.node] if lister else [])
    found += [
        Finding.across(pair, f"{r.node}: large directory: {r.large_dir.error}")
        for r in dict.fromkeys([writer, *([lister] if lister else [])])
        if r.large_dir is not None and r.large_dir.error and not r.large_dir.gave_up
    ]
    if lister is None or lister.large_dir is None or lister.large_dir.listed is None:
        return Judged(findings=tuple(found) or (Finding.across(pair, "no node listed the large directory"),))
    listed = lister.large_dir
    if listed.listed != wrote.files:
        found.append(
            Finding.across(
                pair,
                f"{lister.node} lists {listed.listed} files in the directory where {writer.node} made {wrote.files} "
                f"({writer.path}/large)",
            )
        )
    m = Measurement.across(
        "storage.large_dir_list",
        listed.list_s,
        "s",
        pair,
        detail=f"{listed.listed} files listed by {lister.node}; {writer.node} made them in {wrote.create_s:.3g} s",
        job_id=job_id,
    )
    line = thresholds.get("storage.large_dir_list")
    if line is None:
        return Judged(unjudged=(m,), findings=(*found, missing_line(thresholds, "storage.large_dir_list", list(pair))))
    verdict = judge(m, line)
    return Judged((verdict,), findings=(*found, *([f] if (f := verdict.finding()) else [])))

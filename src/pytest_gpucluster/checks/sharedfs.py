"""Shared filesystem, judged on the login node: the ``NodeReport`` every node wrote
(``workloads.sharedfs.check_node``) turned into findings and the space readings to compare with
the thresholds. A node that does not see the shared filesystem is named as exactly that: also one
that wrote nothing at all into the job's folder there (``silent``), since that folder is on it.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence

from pytest_gpucluster.checks.places import off_majority
from pytest_gpucluster.verdict import Finding, Measurement
from pytest_gpucluster.workloads.sharedfs import APPEND_FILE, APPEND_SETTLE_S, MARKER, GiB, NodeReport, Prepared


def visibility_findings(
    reports: Sequence[NodeReport], prepared: Prepared, nodes: Sequence[str], silent: Mapping[str, str] = {}
) -> list[Finding]:
    """The filesystem is mounted on every node of ``nodes``, is the same filesystem, and is the
    login node's. ``silent``: nodes that wrote nothing into the job's folder on it (node → why)."""
    found = [
        Finding.on_node(
            n,
            f"{n}: does not see the shared filesystem {prepared.root_template}: it wrote nothing into the "
            f"job's folder there while the other nodes did ({why})",
        )
        for n, why in silent.items()
    ]
    reported = {r.node for r in reports}
    found += [
        Finding.on_node(n, f"{n}: sent no report from the shared-filesystem job")
        for n in nodes
        if n not in reported and n not in silent
    ]
    for r in reports:
        if not r.root_exists:
            found.append(
                Finding.on_node(
                    r.node, f"{r.node}: {prepared.root_of(r.path)} does not exist (shared filesystem not mounted?)"
                )
            )
        elif r.marker == "missing":
            found.append(
                Finding.on_node(
                    r.node,
                    f"{r.node}: does not see {MARKER} that the login node wrote in {prepared.directory}: "
                    f"{prepared.root_of(r.path)} on {r.node} is not the login node's filesystem (not shared: "
                    "the node sees its own copy, or the shared filesystem is not mounted there)",
                )
            )
        elif r.marker == "different":
            found.append(
                Finding.on_node(
                    r.node, f"{r.node}: {r.path}/{MARKER} holds another run's token: not the same directory"
                )
            )
        elif r.mode != 0o700:
            found.append(
                Finding.on_node(
                    r.node, f"{r.node}: the private directory reads as mode {r.mode:04o}, the login node made 0700"
                )
            )
    mounted = [r for r in reports if r.mount is not None and r.marker == "ok"]
    found += _odd_ones_out(
        {r.node: (r.mount.fstype, r.mount.source) for r in mounted if r.mount},
        lambda n: f"{n}: {_of(mounted, n).path} lies on {_mount(mounted, n)}",
    )
    sized = [r for r in reports if r.marker == "ok"]
    sizes = [r.capacity_bytes for r in sized]
    if sizes and max(sizes) > 1.01 * min(sizes):
        largest = max(sizes)
        found += _odd_ones_out(
            {r.node: r.capacity_bytes >= largest / 1.01 for r in sized},
            lambda n: f"{n}: the filesystem's size reads {_of(sized, n).capacity_bytes / GiB:.1f} GiB",
        )
    return found


def _of(reports: Sequence[NodeReport], node: str) -> NodeReport:
    return next(r for r in reports if r.node == node)


def _mount(reports: Sequence[NodeReport], node: str) -> str:
    mount = _of(reports, node).mount
    return mount.describe() if mount is not None else "?"


def _odd_ones_out(seen: Mapping[str, Hashable], say: Callable[[str], str]) -> list[Finding]:
    """Where nodes read differently: the nodes that differ from a strict majority are the
    culprits, one finding each; with no majority every node is named together, no culprit."""
    if len(set(seen.values())) < 2:
        return []
    odd = off_majority(seen)
    if odd:
        return [Finding.on_node(n, say(n)) for n in odd]
    return [Finding.across(list(seen), "; ".join(say(n) for n in seen))]


def space(reports: Sequence[NodeReport], root: str, job: str) -> list[Measurement]:
    """The smallest capacity and free space any node reads, each on its node; NaN (never a pass)
    on every reporting node when none has the path."""
    seen = [r for r in reports if r.root_exists]
    if not seen:
        nodes = [r.node for r in reports]
        return [
            Measurement.across(metric, float("nan"), "GiB", nodes, detail=root, job_id=job)
            for metric in ("sharedfs.capacity", "sharedfs.free")
        ]
    small = min(seen, key=lambda r: r.capacity_bytes)
    tight = min(seen, key=lambda r: r.free_bytes)
    return [
        Measurement.at("sharedfs.capacity", small.capacity_bytes / GiB, "GiB", small.node, detail=root, job_id=job),
        Measurement.at("sharedfs.free", tight.free_bytes / GiB, "GiB", tight.node, detail=root, job_id=job),
    ]


def _not_measured(reports: Sequence[NodeReport], nodes: Sequence[str]) -> list[Finding]:
    """Why the exchange could not be measured on every node (never a silent pass): each node that
    took no part or erred; a node missing, or a barrier given up on (waiting for another node),
    leaves the exchange of the nodes together not measured, with no culprit of its own (the
    shared filesystem's own check names why a node is missing)."""
    found = [
        Finding.on_node(r.node, f"{r.node}: took no part (it does not see the login node's directory)")
        for r in reports
        if r.marker != "ok"
    ]
    found += [Finding.on_node(r.node, f"{r.node}: {e}") for r in reports for e in r.errors]
    missing = [n for n in nodes if n not in {r.node for r in reports}]
    waited = [f"{r.node} gave up waiting at barrier {r.barrier_timeout}" for r in reports if r.barrier_timeout]
    if missing or waited:
        said = [f"only {len(reports)} of {len(nodes)} node(s) reported: no exchange with {', '.join(missing)}"] * bool(
            missing
        )
        found.append(Finding.across([*missing, *(r.node for r in reports)], "; ".join([*said, *waited])))
    return found


def readback_findings(reports: Sequence[NodeReport], nodes: Sequence[str], *, renamed: bool = False) -> list[Finding]:
    """Each node read its neighbour's file byte-identical (sha256); with ``renamed``, the file the
    neighbour published by atomic rename, complete under its final name. A wrong read names the
    reader and the writer together (either node's view of the filesystem may be at fault)."""
    found = _not_measured(reports, nodes)
    if found:
        return found
    by_rank = {r.rank: r for r in reports}
    prefix = "renamed-" if renamed else "data-"
    what = "the file published by rename" if renamed else "the file"
    for r in reports:
        writer = by_rank[(r.rank + 1) % len(reports)]
        for name, sha in r.read.items():
            expected = writer.wrote.get(name)
            if name.startswith(prefix) and sha != expected:
                found.append(
                    Finding.across(
                        [r.node, writer.node],
                        f"{r.node}: read {what} {name} written by {writer.node} with sha256 {sha[:12]}…, "
                        f"{writer.node} wrote {(expected or '')[:12]}…",
                    )
                )
    return found


def append_findings(reports: Sequence[NodeReport], nodes: Sequence[str]) -> list[Finding]:
    """Every node finds every line every node appended to the shared file, once and whole; the
    node that finds lines missing (still, after reading again for APPEND_SETTLE_S) or torn is
    named. Lines that showed only on a later read are the filesystem's stale copy, a warning of
    the shared filesystem: every node mounts it alike, and which one reads first is chance."""
    found = _not_measured(reports, nodes)
    if found:
        return found
    by_rank = {r.rank: r for r in reports}
    late = {r.node: r.append_settle_s for r in reports if r.append_settle_s}
    if late:
        said = ", ".join(f"{n} {s:.2f} s" for n, s in late.items() if s is not None)
        text = (
            f"the shared filesystem: the lines other nodes appended to {APPEND_FILE} and closed showed on a "
            f"later read only ({said} after the first): a client served a stale copy after the writers closed "
            "the file (no close-to-open consistency), so a job reading another's output as soon as it ends may "
            "read it short"
        )
        found.append(Finding.outside("shared_fs", text, nodes=list(late), severity="warn"))
    for r in reports:
        short = [
            f"{by_rank[k].node} appended {by_rank[k].appended}, {n} found"
            for k, n in r.append_lines.items()
            if k in by_rank and n != by_rank[k].appended
        ]
        if short:
            still = f", still after {APPEND_SETTLE_S:g} s of reading again" if r.append_settle_s is None else ""
            found.append(
                Finding.on_node(
                    r.node, f"{r.node}: the shared {APPEND_FILE} lost or doubled lines ({'; '.join(short)}{still})"
                )
            )
        if r.append_garbled:
            found.append(
                Finding.on_node(
                    r.node, f"{r.node}: the shared {APPEND_FILE} has {r.append_garbled} torn or mixed line(s)"
                )
            )
    return found

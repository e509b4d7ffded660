"""Shared filesystem, judged on the login node: the ``NodeReport`` every node wrote
(``workloads.sharedfs.check_node``) turned into problems and the space readings to compare
with the thresholds.
"""

from __future__ import annotations

from collections.abc import Sequence

from pytest_gpucluster.workloads.sharedfs import APPEND_FILE, MARKER, GiB, NodeReport, Prepared


def visibility_problems(reports: Sequence[NodeReport], prepared: Prepared, expected_nodes: int) -> list[str]:
    """The filesystem is mounted on every node, is the same filesystem, and is the login node's."""
    problems = []
    if len(reports) != expected_nodes:
        problems.append(f"{len(reports)} node(s) reported, {expected_nodes} expected")
    for r in reports:
        if not r.root_exists:
            problems.append(f"{r.node}: {prepared.root_of(r.path)} does not exist (shared filesystem not mounted?)")
        elif r.marker == "missing":
            problems.append(
                f"{r.node}: does not see {MARKER} that the login node wrote in {prepared.directory}: "
                f"{prepared.root_of(r.path)} on {r.node} is not the login node's filesystem (not shared: "
                "the node sees its own copy, or the shared filesystem is not mounted there)"
            )
        elif r.marker == "different":
            problems.append(f"{r.node}: {r.path}/{MARKER} holds another run's token: not the same directory")
        elif r.mode != 0o700:
            problems.append(f"{r.node}: the private directory reads as mode {r.mode:04o}, the login node made 0700")
    mounted = [r for r in reports if r.mount is not None and r.marker == "ok"]
    kinds = {(r.mount.fstype, r.mount.source) for r in mounted if r.mount}
    if len(kinds) > 1:
        for r in mounted:
            assert r.mount is not None
            problems.append(f"{r.node}: {r.path} lies on {r.mount.describe()}")
    sizes = [r.capacity_bytes for r in reports if r.marker == "ok"]
    if sizes and max(sizes) > 1.01 * min(sizes):
        for r in reports:
            if r.marker == "ok":
                problems.append(f"{r.node}: the filesystem's size reads {r.capacity_bytes / GiB:.1f} GiB")
    return problems


def space(reports: Sequence[NodeReport], root: str) -> list[tuple[str, str, float]]:
    """(metric, ``node:path``, GiB) for the smallest capacity and free space any node reads; NaN
    (never a pass) when no node has the path."""
    seen = [r for r in reports if r.root_exists]
    if not seen:
        return [("sharedfs.capacity", root, float("nan")), ("sharedfs.free", root, float("nan"))]
    small = min(seen, key=lambda r: r.capacity_bytes)
    tight = min(seen, key=lambda r: r.free_bytes)
    return [
        ("sharedfs.capacity", f"{small.node}:{root}", small.capacity_bytes / GiB),
        ("sharedfs.free", f"{tight.node}:{root}", tight.free_bytes / GiB),
    ]


def _not_measured(reports: Sequence[NodeReport], expected_nodes: int) -> list[str]:
    """Why the exchange could not be measured on every node (never a silent pass)."""
    problems = [
        f"{r.node}: took no part (it does not see the login node's directory)" for r in reports if r.marker != "ok"
    ]
    if len(reports) < expected_nodes:
        problems.append(f"only {len(reports)} of {expected_nodes} node(s) reported")
    problems += [f"{r.node}: gave up waiting at barrier {r.barrier_timeout}" for r in reports if r.barrier_timeout]
    return problems + [f"{r.node}: {e}" for r in reports for e in r.errors]


def readback_problems(reports: Sequence[NodeReport], expected_nodes: int, *, renamed: bool = False) -> list[str]:
    """Each node read its neighbour's file byte-identical (sha256); with ``renamed``, the file the
    neighbour published by atomic rename, complete under its final name."""
    problems = _not_measured(reports, expected_nodes)
    if problems:
        return problems
    by_rank = {r.rank: r for r in reports}
    prefix = "renamed-" if renamed else "data-"
    what = "the file published by rename" if renamed else "the file"
    for r in reports:
        writer = by_rank[(r.rank + 1) % len(reports)]
        for name, sha in r.read.items():
            expected = writer.wrote.get(name)
            if name.startswith(prefix) and sha != expected:
                problems.append(
                    f"{r.node}: read {what} {name} written by {writer.node} with sha256 {sha[:12]}…, "
                    f"{writer.node} wrote {(expected or '')[:12]}…"
                )
    return problems


def append_problems(reports: Sequence[NodeReport], expected_nodes: int) -> list[str]:
    """Every node finds every line every node appended to the shared file, once and whole."""
    problems = _not_measured(reports, expected_nodes)
    if problems:
        return problems
    by_rank = {r.rank: r for r in reports}
    for r in reports:
        short = [
            f"{by_rank[k].node} appended {by_rank[k].appended}, {n} found"
            for k, n in r.append_lines.items()
            if k in by_rank and n != by_rank[k].appended
        ]
        if short:
            problems.append(f"{r.node}: the shared {APPEND_FILE} lost or doubled lines ({'; '.join(short)})")
        if r.append_garbled:
            problems.append(f"{r.node}: the shared {APPEND_FILE} has {r.append_garbled} torn or mixed line(s)")
    return problems

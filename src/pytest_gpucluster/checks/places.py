"""What several checks need to put a finding on its place: a GPU's index from the label a
workload gives it (``gpu3``), a finding of one node or of several nodes together, and the nodes
that read differently from a strict majority of nodes."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Hashable, Iterable, Mapping, Sequence

from pytest_gpucluster.verdict import Finding, Severity

_GPU = re.compile(r"gpu(\d+)")


def gpu_index(label: str) -> int | None:
    """``gpu3`` → 3; None for any other label (``cpu0``, a PCI address)."""
    found = _GPU.fullmatch(label)
    return int(found.group(1)) if found else None


def of_nodes(nodes: Sequence[str], text: str, *, culprits: Iterable[str] = (), severity: Severity = "fail") -> Finding:
    """A finding of one node (its culprit), or of several together with ``culprits`` (none where
    the check cannot tell)."""
    if len(set(nodes)) == 1:
        return Finding.on_node(nodes[0], text, severity=severity)
    return Finding.across(nodes, text, culprits=culprits, severity=severity)


def off_majority(seen: Mapping[str, Hashable]) -> tuple[str, ...]:
    """The nodes (node → what it reads) whose reading differs from that of a strict majority of
    nodes; none where no reading has a strict majority, or all agree."""
    if not seen:
        return ()
    common, count = Counter(seen.values()).most_common(1)[0]
    if count * 2 <= len(seen):
        return ()
    return tuple(n for n, v in seen.items() if v != common)


def own_or_setup(seen: Sequence[tuple[str, str, str]], nodes: Sequence[str]) -> list[Finding]:
    """Problems of what Slurm set up, each (kind, node, sentence) as seen on one of ``nodes``.
    A kind seen on no more than half of ``nodes`` (as many of them or more are free of it, set up
    alike) is each such node's own: the node is the culprit of its sentence. A kind seen on more
    than half of them, or on the only node, is the setup's: each of its sentences names the nodes
    it was seen on together, no culprit."""
    on: dict[str, list[str]] = {}
    for kind, node, _ in seen:
        on.setdefault(kind, [])
        if node not in on[kind]:
            on[kind].append(node)
    every = set(nodes) | {node for _, node, _ in seen}
    return [
        Finding.on_node(node, text)
        if len(on[kind]) * 2 <= len(every) and len(on[kind]) < len(every)
        else Finding.across([node, *on[kind]], text)
        for kind, node, text in seen
    ]

"""Every tested node's verdict from the placements of the run's results (``attribution.py``):
REJECTED for a failure of its own (or lost under a job, or left out before any job), INCOMPLETE
when a check of it was not judged, otherwise ACCEPTED (PARTIAL in a partial run: only the
selected checks speak for it). Failures on no node's account are listed apart: they may be the
fabric's, not any node's. Pure: the run's typed results in, frozen dataclasses out."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from pytest_gpucluster.outcomes import UNJUDGED
from pytest_gpucluster.verdict.attribution import CLUSTER_ROW, Placed, known_nodes, placements
from pytest_gpucluster.verdict.check import RunRecord
from pytest_gpucluster.verdict.fold import fold_lines
from pytest_gpucluster.verdict.ranges import hostlist

NodeOverall = Literal["ACCEPTED", "REJECTED", "INCOMPLETE", "PARTIAL"]


@dataclass(frozen=True)
class NodeVerdict:
    """One node's verdict and the sentences that decided it."""

    node: str
    verdict: NodeOverall
    reasons: tuple[str, ...] = ()
    checks: tuple[str, ...] = ()  # the checks (test functions) whose results decided a REJECTED or INCOMPLETE
    # Left out before any job or lost during the run: the checks it never reached are unknown, so
    # ``checks`` does not say all a re-test must pass for it (``merge.handover``).
    unfinished: bool = False
    unjudged: tuple[str, ...] = ()  # a REJECTED node's checks not judged either: a re-test must pass them too


@dataclass(frozen=True)
class Nodes:
    """Every tested node's verdict, what no single node explains, and the one-line summary."""

    verdicts: tuple[NodeVerdict, ...]
    cluster_wide: tuple[str, ...]  # failures no node is named in (a fabric-wide fault, say)
    summary: str  # "1 of 2 nodes accepted; rejected: node2"
    exclude: str  # the rejected nodes as a Slurm hostlist, for sbatch --exclude=


def node_verdicts(run: RunRecord, run_verdict: str = "", placed: Sequence[Placed] | None = None) -> Nodes:
    """Per node, from the placements (``attribution.placements``): REJECTED when a failure is its
    own, it was lost during the run or left out before any job; INCOMPLETE when a check of it was
    not judged; otherwise ACCEPTED, or PARTIAL in a partial run."""
    placed = placements(run) if placed is None else placed
    lost, excluded = run.lost, run.excluded
    known = known_nodes(run)
    partial = run_verdict == "PARTIAL" or run.partial
    out: list[NodeVerdict] = []
    for node in dict.fromkeys([*known, *map(str, excluded)]):
        mine = [p for p in placed if p.row == node]
        bad = [p.line for p in mine if p.convicts]
        if node in excluded:
            bad.insert(0, f"{node}: Slurm reports it {excluded[node]}; not tested")
        if node in lost:
            seen = lost[node]
            why = seen.get("why", seen) if isinstance(seen, Mapping) else seen
            bad.insert(0, f"{node}: lost during the run: {why}")
        unjudged = [p for p in mine if p.status in UNJUDGED]
        if bad:
            checks = tuple(dict.fromkeys(p.column[1] for p in mine if p.convicts))
            lines = tuple(fold_lines(dict.fromkeys(bad), known))
            also = tuple(c for c in dict.fromkeys(p.column[1] for p in unjudged) if c not in checks)
            out.append(
                NodeVerdict(node, "REJECTED", lines, checks, unfinished=node in excluded or node in lost, unjudged=also)
            )
            continue
        if unjudged:
            lines = tuple(fold_lines(dict.fromkeys(p.line for p in unjudged), known))
            out.append(NodeVerdict(node, "INCOMPLETE", lines, tuple(dict.fromkeys(p.column[1] for p in unjudged))))
            continue
        out.append(NodeVerdict(node, "PARTIAL" if partial else "ACCEPTED"))
    wide = [p.line for p in placed if p.row == CLUSTER_ROW and p.status == "fail"]
    cluster_wide = tuple(fold_lines(dict.fromkeys(wide), [*known, *map(str, excluded)]))
    summary = nodes_summary({v.node: v.verdict for v in out}, len(cluster_wide))
    return Nodes(tuple(out), cluster_wide, summary, hostlist([v.node for v in out if v.verdict == "REJECTED"]))


def nodes_summary(verdicts: Mapping[str, str], cluster_wide: int) -> str:
    """ "14 of 16 nodes accepted; rejected: gpu-[03,11]; not judged in full: ...": node → verdict."""
    accepted = [n for n, v in verdicts.items() if v == "ACCEPTED"]
    rejected = [n for n, v in verdicts.items() if v == "REJECTED"]
    unsure = [n for n, v in verdicts.items() if v not in ("ACCEPTED", "REJECTED")]
    parts = [f"{len(accepted)} of {len(verdicts)} node{'s' if len(verdicts) != 1 else ''} accepted"]
    if rejected:
        parts.append(f"rejected: {hostlist(rejected)}")
    if unsure:
        parts.append(f"not judged in full: {hostlist(unsure)}")
    if cluster_wide:
        parts.append(f"{cluster_wide} failure(s) name no single node")
    return "; ".join(parts)

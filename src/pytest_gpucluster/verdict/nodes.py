"""Every tested node's verdict from the node × check matrix (``attribution.py``): which node a failure
convicts, which node a lost neighbour left not judged in full, and the failures no node explains.
Pure: a results document in, frozen dataclasses out."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from pytest_gpucluster.fold import fold_lines
from pytest_gpucluster.ranges import hostlist
from pytest_gpucluster.verdict.attribution import CLUSTER_ROW, known_nodes, matrix, nodes_in
from pytest_gpucluster.verdict.findings import SEVERITY

NodeOverall = Literal["ACCEPTED", "REJECTED", "INCOMPLETE", "PARTIAL"]


@dataclass(frozen=True)
class NodeVerdict:
    """One node's verdict and the sentences that decided it."""

    node: str
    verdict: NodeOverall
    reasons: tuple[str, ...] = ()
    checks: tuple[str, ...] = ()  # the checks (test functions) whose results decided a REJECTED or INCOMPLETE


@dataclass(frozen=True)
class Nodes:
    """Every tested node's verdict, what no single node explains, and the one-line summary."""

    verdicts: tuple[NodeVerdict, ...]
    cluster_wide: tuple[str, ...]  # failures no node is named in (a fabric-wide fault, say)
    summary: str  # "1 of 2 nodes accepted; rejected: node2"
    exclude: str  # the rejected nodes as a Slurm hostlist, for sbatch --exclude=

    def to_json(self) -> dict[str, Any]:
        """Plain dict for the results file."""
        return {
            "summary": self.summary,
            "exclude": self.exclude,
            "cluster_wide": list(self.cluster_wide),
            "verdicts": {
                v.node: {"verdict": v.verdict, "reasons": list(v.reasons), "checks": list(v.checks)}
                for v in self.verdicts
            },
        }


def node_verdicts(doc: Mapping[str, Any], run_verdict: str = "") -> Nodes:
    """Per node, from the matrix's attribution: REJECTED when a check failed on it (or the run
    lost it, or Slurm excluded it), INCOMPLETE when a check of it was skipped or failed only
    because of another node the run lost or Slurm excluded (a job spanning both, a comparison
    left with one node), otherwise ACCEPTED (PARTIAL in a partial run: only the selected checks
    speak for it). Failures that name no node are listed apart: they may be the fabric's, not
    any node's."""
    m = matrix(doc)
    env = doc.get("environment", {})
    lost = env.get("lost_nodes") or {}
    excluded = env.get("excluded_nodes") or {}
    out: list[NodeVerdict] = []
    known = known_nodes(doc)
    unattributed: list[str] = []  # a failure of several nodes together that no isolation pinned on one
    gone = sorted({*lost, *excluded})
    for node in [*known, *[n for n in excluded if n not in known]]:
        bad: list[str] = []
        skipped: list[str] = []
        bad_checks: list[str] = []
        skipped_checks: list[str] = []
        if node in excluded:
            bad.append(f"{node}: Slurm reports it {excluded[node]}; not tested")
        if node in lost:
            seen = lost[node]
            why = seen.get("why", seen) if isinstance(seen, Mapping) else seen
            bad.append(f"{node}: lost during the run: {why}")
        for col in m.columns:
            cell = m.cell(node, col)
            if SEVERITY.get(cell.status, 0) >= SEVERITY["xpass"]:
                for line in (x for x in cell.lines if _says_failure(x)):
                    others = [n for n in nodes_in(line, gone) if n != node] if node not in gone else []
                    if others:
                        skipped.append(f"not judged: {hostlist(others)} lost or left out ({line})")
                        skipped_checks.append(col[1])
                    elif _convicts(line, node):
                        bad.append(line)
                        bad_checks.append(col[1])
                    else:
                        unattributed.append(line)
            elif cell.status == "skip":
                skipped += list(cell.lines)
                skipped_checks.append(col[1])
        bad = fold_lines(dict.fromkeys(bad), known)
        if bad:
            out.append(NodeVerdict(node, "REJECTED", tuple(bad), tuple(dict.fromkeys(bad_checks))))
        elif skipped:
            out.append(
                NodeVerdict(node, "INCOMPLETE", tuple(fold_lines(dict.fromkeys(skipped), known)), tuple(skipped_checks))
            )
        else:
            partial = run_verdict == "PARTIAL" or bool((doc.get("selection") or {}).get("partial"))
            out.append(NodeVerdict(node, "PARTIAL" if partial else "ACCEPTED"))
    everyone = [*known, *excluded]
    cluster_wide = tuple(
        fold_lines(
            dict.fromkeys(
                [
                    *(
                        line
                        for col in m.columns
                        for line in m.cell(CLUSTER_ROW, col).lines
                        if SEVERITY.get(m.cell(CLUSTER_ROW, col).status, 0) >= SEVERITY["xpass"]
                        and _says_failure(line)
                        and not nodes_in(line, everyone)
                    ),
                    *unattributed,
                ]
            ),
            everyone,
        )
    )
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


def _convicts(line: str, node: str) -> bool:
    """Whether a failure sentence is ``node``'s own: its place is the node (``node3``,
    ``node3:gpu5``), or it is a measurement of several nodes together (``node1+node2``) whose
    bad-node isolation named ``node``. A pair that failed with no node isolated may be the
    fabric's: it convicts neither node."""
    where = line.split(": ", 1)[0]
    if "+" not in where:
        return True
    named = re.search(r"bad node\(s\): ([^(]*)", line)
    return bool(named and node in [n.strip() for n in named.group(1).split(",")])


def _says_failure(line: str) -> bool:
    """Whether a matrix cell's line explains a failure (not a pass or a warning beside it)."""
    return not line.endswith((": pass", ": warn")) and "within bounds" not in line and "the warn line" not in line

"""Judging the straggler check: neighbour node pairs exchanging at once (``workloads.pair_exchange``)
turned into one verdict per pair and figure, and the slow pairs and slow nodes they name.

A pair is slow when a figure of it is past its fail line (latency above, bandwidth below) or it
received wrong data. A node whose every pair is slow, with two partners or more, is the slow node:
the fault goes with it wherever it is paired. A slow pair whose nodes are each fine with another
partner is the pair's own (the cable or the links between them): named, no node convicted. Where
every pair is slow the fault is common to all (the fabric, a setting), and no node is convicted;
with two nodes, one pair cannot tell.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from pytest_gpucluster.checks.lines import missing_line
from pytest_gpucluster.checks.pairing import Pair
from pytest_gpucluster.config import Threshold, ThresholdSet
from pytest_gpucluster.verdict import Finding, Measurement, Verdict, judge
from pytest_gpucluster.workloads.busbw import human_bytes
from pytest_gpucluster.workloads.pair_exchange import PairResult

GUIDE = "docs/nccl.md, Layer by layer, says what to expect"

LATENCY = "nccl.sendrecv.pair_latency"
BANDWIDTH = "nccl.sendrecv.pair_busbw"


@dataclass(frozen=True)
class PairsJudged:
    """Every pair's verdicts, the figures no line judged, and the findings drawn from them."""

    verdicts: tuple[Verdict, ...]
    unjudged: tuple[Measurement, ...]
    findings: tuple[Finding, ...]
    slow_pairs: tuple[Pair, ...]
    slow_nodes: tuple[str, ...]


def measurements(result: PairResult, job_id: str | None = None) -> tuple[Measurement, Measurement]:
    """A pair's latency and bandwidth, each of the pair's two nodes together."""
    detail = (
        f"round {result.round + 1}, {result.n_ranks} ranks, slowest lane; {human_bytes(result.latency_bytes)} "
        f"and {human_bytes(result.bandwidth_bytes)} exchanged both ways, {result.iters} times, {result.backend}"
    )
    return (
        Measurement.across(LATENCY, result.latency_ms, "ms", result.nodes, detail=detail, job_id=job_id),
        Measurement.across(BANDWIDTH, result.busbw, "GB/s", result.nodes, detail=detail, job_id=job_id),
    )


def slow_nodes(pairs: Sequence[Pair], slow: Sequence[Pair]) -> tuple[str, ...]:
    """The nodes slow with every partner they had, two or more of them; none where every pair is
    slow (a fault common to all)."""
    bad = set(slow)
    if not pairs or bad >= set(pairs):
        return ()
    nodes = list(dict.fromkeys(n for pair in pairs for n in pair))
    out = []
    for node in nodes:
        own = [p for p in pairs if node in p]
        partners = {n for p in own for n in p if n != node}
        if len(partners) >= 2 and all(p in bad for p in own):
            out.append(node)
    return tuple(out)


def judge_pairs(
    results: Sequence[PairResult],
    lines: Mapping[str, Threshold | None],
    *,
    job_id: str | None = None,
) -> PairsJudged:
    """Judge every pair by ``lines`` (``LATENCY``, ``BANDWIDTH``; None: no line, the figure is
    kept unjudged) and name the slow pairs and nodes (see the module's docstring)."""
    verdicts: list[Verdict] = []
    unjudged: list[Measurement] = []
    problems: dict[Pair, list[str]] = {}
    warnings: list[Verdict] = []
    for result in results:
        pair = (result.nodes[0], result.nodes[1])
        if result.wrong:
            problems.setdefault(pair, []).append(
                f"{'+'.join(pair)}: {result.wrong} element(s) received wrong in send/recv (round {result.round + 1})"
            )
        for m in measurements(result, job_id):
            line = lines.get(m.metric)
            if line is None:
                unjudged.append(m)
                continue
            verdict = judge(m, line)
            verdicts.append(verdict)
            if verdict.status == "fail":
                problems.setdefault(pair, []).append(verdict.sentence)
            elif verdict.status == "warn":
                warnings.append(verdict)
    pairs = list(dict.fromkeys((r.nodes[0], r.nodes[1]) for r in results))
    slow = [p for p in pairs if p in problems]
    culprits = slow_nodes(pairs, slow)
    findings = [_pair_finding(pair, problems[pair], culprits, pairs, len(slow)) for pair in slow]
    for w in warnings:
        found = w.finding()
        if found is not None:
            findings.append(found)
    return PairsJudged(tuple(verdicts), tuple(unjudged), tuple(findings), tuple(slow), culprits)


def _pair_finding(
    pair: Pair, problems: list[str], culprits: Sequence[str], pairs: Sequence[Pair], slow: int
) -> Finding:
    named = [n for n in pair if n in culprits]
    if named:
        why = "; ".join(
            f"{n} is slow with every partner ({', '.join('+'.join(p) for p in pairs if n in p)})" for n in named
        )
    elif len(pairs) == 1:
        why = "one pair: which of its two nodes is slow, one pair cannot tell (a third node tells)"
    elif slow == len(pairs):
        why = "every pair is slow: a fault common to all (the fabric, a setting), not one node's"
    else:
        why = "slow with this partner only: the pair's own path (the cable, links or ports between them)"
    return Finding.across(pair, "; ".join(problems) + f" ({why})", culprits=named)


def lines(thresholds: ThresholdSet) -> dict[str, Threshold | None]:
    """The check's lines in force (None where the set has none)."""
    return {metric: thresholds.get(metric) for metric in (LATENCY, BANDWIDTH)}


def with_missing(judged: PairsJudged, thresholds: ThresholdSet) -> tuple[Finding, ...]:
    """``judged``'s findings and, for each figure no line judged, a warning that says how to set
    one: the pairs are judged by the lines there are (the latency line is the default set's), and
    a figure without one is kept for the page and for ``--gpucluster-calibrate``."""
    missing = dict.fromkeys(m.metric for m in judged.unjudged)
    nodes = tuple(dict.fromkeys(n for m in judged.unjudged for n in m.nodes))
    return judged.findings + tuple(missing_line(thresholds, metric, nodes, GUIDE) for metric in missing)

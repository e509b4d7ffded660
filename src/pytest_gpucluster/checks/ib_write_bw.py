"""perftest's ib_write_bw between node pairs, planned and judged on the login node.

The pairs are neighbours in the tested nodes' order, as ``checks.pairing`` pairs them first
(an odd node out is paired with the first node, after that node's own pair). Each pair writes
both ways, one direction after the other, over every InfiniBand port active on both nodes (the
node probe's reading), all ports at once. Every (pair, direction, port) meets on a TCP port of its
own, so no client can reach a server meant for another. Each run's Gb/s is judged per HCA,
naming the node, the HCA and the peer; a node's check reads every run its HCAs took part in,
writing or written to.

A run measures a pair: its Gb/s, and a run that measured nothing, name both nodes together. The
pairing rule (``checks.pairing``) isolates a node per HCA where the runs allow it: an HCA that is
slow with a peer whose same HCA is fast with another node is its node's (the odd node out meets
two peers), and the measurement names it as the culprit.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from pytest_gpucluster.checks.pairing import Pair, Pairing
from pytest_gpucluster.verdict import Finding, Measurement
from pytest_gpucluster.workloads.ib_write_bw import SIZE, Hca, NodeWrites, Step, WriteResult
from pytest_gpucluster.workloads.infiniband import IbNode

METRIC = "ib_write_bw.per_hca"
BASE_TCP_PORT = 18515  # perftest's own default port, and the ones after it
_UNIT = re.compile(r"BW average\[([^\]]+)\]")
# Bits per second for each unit perftest reports in (MiB/sec without --report_gbits).
_GBPS = {"Gb/sec": 1.0, "MiB/sec": 2**20 * 8 / 1e9, "MB/sec": 2**20 * 8 / 1e9}


def pairs_for(nodes: Sequence[str]) -> list[Pair]:
    """Neighbour pairs; an odd node out is paired with the first node."""
    pairs = Pairing(list(nodes)).next_round()
    if len(nodes) > 1 and len(nodes) % 2:
        pairs.append((nodes[-1], nodes[0]))
    return pairs


def active_ports(reading: IbNode, link_layer: str) -> list[tuple[str, str]]:
    """(device, port) of every port of ``link_layer`` that is ACTIVE and LinkUp."""
    return sorted((p.device, p.port) for p in reading.ports if p.active and p.link_layer.lower() == link_layer.lower())


@dataclass(frozen=True)
class PairPlan:
    """Every node's steps in order, and for each node the ports it could not be measured on."""

    pairs: tuple[Pair, ...]
    steps: dict[str, list[Step]] = field(default_factory=dict)
    unmatched: dict[str, list[Finding]] = field(default_factory=dict)  # each of the port not active

    @property
    def longest(self) -> int:
        """The most steps one node takes (the job's time limit follows it)."""
        return max((len(s) for s in self.steps.values()), default=0)


def plan_steps(
    pairs: Iterable[Pair], ports: Mapping[str, Sequence[tuple[str, str]]], base_port: int = BASE_TCP_PORT
) -> PairPlan:
    """For every pair, two steps on each of its nodes (a serves while b writes, then the other
    way round) over the ports active on both. A port active on one node only is reported against
    the node where it is not active (a finding of that port)."""
    pairs = list(pairs)
    stride = max((len(p) for p in ports.values()), default=0) or 1
    steps: dict[str, list[Step]] = {}
    unmatched: dict[str, list[Finding]] = {}
    for index, (a, b) in enumerate(pairs):
        mine, theirs = set(ports.get(a, ())), set(ports.get(b, ()))
        common = sorted(mine & theirs)
        for node, peer, missing in ((a, b, theirs - mine), (b, a, mine - theirs)):
            for device, port in sorted(missing):
                text = (
                    f"{node}:{device}/{port} is not an active InfiniBand port there, so ib_write_bw could not "
                    f"measure it against {peer}:{device}/{port}"
                )
                unmatched.setdefault(node, []).append(Finding.on_node(node, text, port=f"{device}/{port}"))
        if not common:
            continue
        for direction, (server, client) in enumerate(((a, b), (b, a))):
            first = base_port + (2 * index + direction) * stride
            hcas = tuple(Hca(device, port, first + k) for k, (device, port) in enumerate(common))
            steps.setdefault(server, []).append(Step("server", client, hcas))
            steps.setdefault(client, []).append(Step("client", server, hcas))
    return PairPlan(tuple(pairs), steps, unmatched)


def parse_bw(text: str) -> float | None:
    """The average bandwidth in Gb/s from ib_write_bw's result table, or None when it has none
    (``#bytes #iterations BW peak[Gb/sec] BW average[Gb/sec] MsgRate[Mpps]`` and one row)."""
    factor: float | None = None
    for line in text.splitlines():
        if factor is None:
            unit = _UNIT.search(line)
            if unit:
                factor = _GBPS.get(unit.group(1).strip())
                if factor is None:
                    return None
            continue
        fields = line.split()
        if len(fields) >= 4 and fields[0].isdigit():
            try:
                return float(fields[3]) * factor
            except ValueError:
                return None
    return None


def _why(r: WriteResult, connect_wait_s: float) -> str:
    if r.timed_out:
        if r.role == "server":
            return f"no client connected within {connect_wait_s:g} s; the server was killed"
        return "still running at its timeout; killed"
    tail = " | ".join(line.strip() for line in (r.stderr or r.stdout).strip().splitlines()[-3:]) or "no output"
    tries = f" after {r.attempts} attempts in {r.seconds:.0f} s" if r.attempts > 1 else ""
    return f"exited {r.returncode}{tries} without a bandwidth ({tail})"


@dataclass(frozen=True)
class NodeJudgement:
    """What one node's check judges: its measurements, its problems, or why it does not apply."""

    measurements: tuple[Measurement, ...] = ()
    problems: tuple[Finding, ...] = ()
    not_applicable: str = ""


def _measured(writes: Mapping[str, NodeWrites]) -> list[tuple[WriteResult, float]]:
    """Every client run that reported its bandwidth, with its Gb/s."""
    return [
        (r, gbps)
        for w in writes.values()
        if w.found
        for r in w.results
        if r.role == "client" and (gbps := parse_bw(r.stdout)) is not None
    ]


def isolated(writes: Mapping[str, NodeWrites], fail_below: float | None) -> dict[str, tuple[str, ...]]:
    """HCA (``mlx5_0/1``) → the nodes the pairing rule convicts on it: a pair of nodes passes
    on an HCA when every run between them on it is at ``fail_below`` or above; a node that fails
    with a partner that passed with another node is bad. Nothing without a line."""
    if fail_below is None:
        return {}
    runs: dict[str, dict[Pair, bool]] = {}
    for r, gbps in _measured(writes):
        a, b = sorted((r.node, r.peer))
        by_pair = runs.setdefault(f"{r.device}/{r.port}", {})
        by_pair[(a, b)] = by_pair.get((a, b), True) and gbps >= fail_below
    out: dict[str, tuple[str, ...]] = {}
    for hca, outcomes in runs.items():
        nodes = sorted({n for pair in outcomes for n in pair})
        state = Pairing(nodes)
        state.record(outcomes.items())
        if state.bad:
            out[hca] = tuple(n for n in nodes if n in state.bad)
    return out


def judge_node(
    node: str,
    plan: PairPlan,
    writes: Mapping[str, NodeWrites],
    *,
    job_id: str | None = None,
    size: int = SIZE,
    fail_below: float | None = None,
) -> NodeJudgement:
    """Every run ``node``'s HCAs took part in: a measurement of the pair per run that reported
    its bandwidth (with the culprits ``isolated`` finds by ``fail_below``), a finding of the pair
    per run that did not, one of the port per port that could not be measured."""
    if node not in plan.steps:
        if plan.unmatched.get(node):
            return NodeJudgement(problems=tuple(plan.unmatched[node]))
        peers = sorted({b if a == node else a for a, b in plan.pairs if node in (a, b)})
        if not peers:
            return NodeJudgement(not_applicable=f"{node} has no peer to pair with")
        return NodeJudgement(
            not_applicable=f"{node} has no active InfiniBand port in common with its peer {', '.join(peers)}"
        )
    mine = writes.get(node)
    if mine is None:
        answered = ", ".join(sorted(writes)) or "none"
        return NodeJudgement(
            problems=(Finding.on_node(node, f"{node}: no ib_write_bw result came back (answered: {answered})"),)
        )
    if not mine.found:
        return NodeJudgement(not_applicable=f"ib_write_bw (perftest) is not installed on {node}: {mine.absent}")
    peers = sorted({s.peer for s in plan.steps.get(node, ())})
    absent = [p for p in peers if p in writes and not writes[p].found]
    problems = list(plan.unmatched.get(node, ()))
    measurements: list[Measurement] = []
    bad = isolated(writes, fail_below)
    for run in (r for w in writes.values() if w.found for r in w.results):
        if node not in (run.node, run.peer) or run.peer in absent or run.node in absent:
            continue
        hca = f"{run.device}/{run.port}"
        other = run.peer if run.node == node else run.node
        connect_wait_s = writes[run.node].connect_wait_s
        if run.role == "server":
            if run.timed_out or run.returncode not in (0, None):
                text = f"{run.node}:{hca}: ib_write_bw server for {run.peer}: {_why(run, connect_wait_s)}"
                problems.append(Finding.across([run.node, run.peer], text))
            continue
        gbps = parse_bw(run.stdout)
        if gbps is None:
            text = f"{run.node}:{hca}: ib_write_bw to {run.peer}:{hca}: {_why(run, connect_wait_s)}"
            problems.append(Finding.across([run.node, run.peer], text))
            continue
        way = f"to {other}:{hca}" if run.node == node else f"from {other}:{hca}"
        detail = f"{node}:{hca} ib_write_bw {way}, {size // 2**20} MiB messages"
        culprits = [n for n in bad.get(hca, ()) if n in (node, other)]
        measurements.append(
            Measurement.across(METRIC, gbps, "Gb/s", (node, other), culprits=culprits, detail=detail, job_id=job_id)
        )
    if not measurements and not problems and absent:
        return NodeJudgement(not_applicable=f"ib_write_bw is not installed on {node}'s peer {', '.join(absent)}")
    return NodeJudgement(tuple(measurements), tuple(problems))

"""The across-node rounds over the switch tree, judged: every group's busbw against the across-node
line, what ``localise`` names turned into findings of the scope it is (a node, a switch, the links
between switches), and the record of every group's busbw that the report draws from.

A node is convicted only when the rounds name it; a slow leaf is a finding of its switch, slow
uplinks or a slow path between two leaves one of the links, and neither convicts the nodes
beneath them. Before a switch or a link is named, the slow groups that show it are measured once
more without the rest of their round (``remeasure``): a group counts as slow only when both of its
measurements are, so a one-off dip names nothing. Pure: the rounds' sweeps in, typed results out.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pytest_gpucluster.checks.localise import Culprit, Localisation, localise
from pytest_gpucluster.plan.rounds import Group, Round, RoundPlan
from pytest_gpucluster.verdict import Finding
from pytest_gpucluster.workloads.busbw import SweepResult


@dataclass(frozen=True)
class GroupResult:
    """One group of one round: its lowest busbw over the judged sizes (None without a result)
    and its wrong results."""

    round: int  # 1-based
    group: Group
    busbw: float | None
    problems: tuple[str, ...] = ()


@dataclass(frozen=True)
class Lost:
    """A node lost under a round's job: the round (1-based) and Slurm's state and reason. That
    job's groups and every later group holding the node return no result. ``again``: lost under
    the job measuring that round's slow groups once more (``remeasure``), not the round's own."""

    round: int
    reason: str
    again: bool = False


@dataclass(frozen=True)
class RoundsCheck:
    """What the rounds measured and what they name."""

    op: str
    metric: str
    plan: RoundPlan
    results: tuple[GroupResult, ...]
    fail_below: float | None  # the across-node line; None: no bound, nothing is named slow
    localisation: Localisation | None
    findings: tuple[Finding, ...]  # the named culprits, unexplained slow groups, wrong results
    again: tuple[GroupResult, ...] = ()  # the groups measured once more before a switch or link is named

    def to_json(self) -> dict[str, Any]:
        """The results' ``rounds`` entry of the test: leaves, each round's stage, every group's
        busbw, what was named. Compact, since a thousand nodes make 32 769 groups and the results
        file is indented: one line per round, ``groups[k]`` holding round k + 1's groups as
        ``i+j=busbw`` separated by spaces, a node given by its index in the leaves' lists one
        after another (``=`` alone: no result). ``groups_of`` reads it back."""
        index = {n: i for i, n in enumerate(n for leaf in self.plan.leaves for n in leaf.nodes)}
        rounds: list[list[str]] = [[] for _ in self.plan.rounds]
        problems: list[list[Any]] = []
        for r in self.results:
            value = "" if r.busbw is None else f"{r.busbw:.5g}"
            rounds[r.round - 1].append("+".join(str(index[n]) for n in r.group.nodes) + "=" + value)
            problems += [[r.round, list(r.group.nodes), p] for p in r.problems]
        again: dict[int, list[str]] = {}
        for r in self.again:
            value = "" if r.busbw is None else f"{r.busbw:.5g}"
            again.setdefault(r.round, []).append("+".join(str(index[n]) for n in r.group.nodes) + "=" + value)
        return {
            "op": self.op,
            "metric": self.metric,
            "unit": "GB/s",
            "fail_below": self.fail_below,
            "levels": self.plan.levels,
            "leaves": {leaf.name: list(leaf.nodes) for leaf in self.plan.leaves},
            "stages": [r.stage for r in self.plan.rounds],
            "groups": [" ".join(groups) for groups in rounds],
            **({"problems": problems} if problems else {}),
            # The groups measured once more, by the round they first ran in, written as ``groups``.
            **({"again": [[number, " ".join(words)] for number, words in sorted(again.items())]} if again else {}),
            "culprits": [
                {
                    "kind": c.kind,
                    "name": c.name,
                    "leaves": list(c.leaves),
                    "nodes": list(c.nodes),
                    "rounds": list(c.rounds),
                }
                for c in (self.localisation.culprits if self.localisation else ())
            ],
        }


@dataclass(frozen=True)
class RecordedGroup:
    """One group as a ``rounds`` record holds it, its nodes and leaves by name."""

    round: int
    stage: str
    nodes: tuple[str, ...]
    leaves: tuple[str, ...]
    busbw: float | None


def groups_of(record: Mapping[str, Any]) -> list[RecordedGroup]:
    """The groups of a ``rounds`` record (``RoundsCheck.to_json``), names restored."""
    leaves: Mapping[str, Sequence[str]] = record.get("leaves", {})
    names = [str(n) for nodes in leaves.values() for n in nodes]
    leaf_of = {str(n): str(leaf) for leaf, nodes in leaves.items() for n in nodes}
    stages = list(record.get("stages", []))
    out = []
    for number, line in enumerate(record.get("groups", []), start=1):
        stage = str(stages[number - 1]) if number <= len(stages) else ""
        for word in str(line).split():
            members, _, value = word.partition("=")
            nodes = tuple(names[int(i)] for i in members.split("+"))
            held = {leaf_of[n] for n in nodes}
            busbw = float(value) if value else None
            out.append(RecordedGroup(number, stage, nodes, tuple(str(x) for x in leaves if x in held), busbw))
    return out


def group_results(
    plan: RoundPlan,
    sweeps: Mapping[int, Sequence[SweepResult]],
    op: str,
    busbw_of: Callable[[SweepResult], float | None],
) -> tuple[GroupResult, ...]:
    """Every group of the plan with its sweep of ``op`` from its round's results (``sweeps``:
    round number → what its job returned); ``busbw_of`` is the judged busbw of a sweep."""
    out = []
    for number, rnd in enumerate(plan.rounds, start=1):
        found = {frozenset(s.nodes): s for s in sweeps.get(number, ()) if s.op == op}
        for group in rnd.groups:
            sweep = found.get(frozenset(group.nodes))
            if sweep is None:
                out.append(GroupResult(number, group, None))
                continue
            out.append(GroupResult(number, group, busbw_of(sweep), tuple(sweep.correctness_problems())))
    return tuple(out)


def _right(results: Sequence[GroupResult]) -> dict[Group, float]:
    """The busbw of every group that returned right results."""
    return {r.group: r.busbw for r in results if r.busbw is not None and not r.problems}


def remeasure(
    plan: RoundPlan, results: Sequence[GroupResult], fail_below: float | None, lost: Iterable[str] = ()
) -> tuple[tuple[int, Round], ...]:
    """What to measure once more before a switch or a link is named: the slow groups that show
    each leaf, leaf's uplinks or path between two leaves the first results name, without the rest
    of their round. One job per round they ran in (round number, its groups to measure again):
    groups of one round share no node, so those of two culprits met in one round run together.
    A node is not measured again: it is named only when slow in every group it is in, which a
    one-off dip of one group does not make. Groups of a ``lost`` node count for nothing (as in
    ``judge_rounds``). Empty where nothing in the network is named."""
    if fail_below is None:
        return ()
    gone = set(lost)
    found = localise(plan, {g: v for g, v in _right(results).items() if not gone & set(g.nodes)}, fail_below)
    wanted = {g for c in found.culprits if c.kind != "node" for g in c.evidence}
    out = []
    for number, rnd in enumerate(plan.rounds, start=1):
        groups = tuple(g for g in rnd.groups if g in wanted)
        if groups:
            out.append((number, Round(rnd.stage, groups)))
    return tuple(out)


def judge_rounds(
    plan: RoundPlan,
    results: Sequence[GroupResult],
    *,
    op: str,
    metric: str,
    fail_below: float | None,
    parents: Mapping[str, str],
    again: Sequence[GroupResult] = (),
    lost: Mapping[str, Lost] | None = None,
) -> RoundsCheck:
    """Name what is slow (``localise``) and turn it into findings; ``parents``: each leaf's
    switch above it, the far end of its uplinks. ``again``: the groups ``remeasure`` chose,
    measured once more; each is judged by the higher of its two busbws, so it is slow only when
    both measurements are (a re-measure without a result leaves the first). ``lost``: nodes lost
    under a round's job, the whole-cluster round's among them, or under a job measuring groups
    again; each is a finding of its own, the groups it left without a result are not judged,
    naming it, and no group holding it counts, so that neither the other members nor a switch or
    link is convicted for what it did before it was lost. A group whose second measurement a
    loss broke counts for nothing either: its first alone names no switch or link."""
    findings: list[Finding] = []
    for r in results:
        findings += [Finding.across(r.group.nodes, f"{op} in round {r.round}: {p}") for p in r.problems]
    lost = lost or {}
    findings += _lost_findings(plan, op, results, again, lost)
    broken = {r.group for r in again if _lost_again(r, lost)}
    right = {g: v for g, v in _right(results).items() if not lost.keys() & set(g.nodes) and g not in broken}
    if fail_below is None:
        return RoundsCheck(op, metric, plan, tuple(results), None, None, tuple(findings), tuple(again))
    for r in again:
        if r.group in right and r.busbw is not None and not r.problems:
            right[r.group] = max(right[r.group], r.busbw)
    found = localise(plan, right, fail_below)
    worst = _worst(right)  # a group measured twice: the higher, as judged
    partners = _partners(plan, lost, broken)
    for culprit in found.culprits:
        finding = _finding(culprit, op, metric, worst, fail_below, parents)
        if culprit.kind == "node" and culprit.name in partners:
            # Its groups with a lost node do not count, and one of them may be where it was fast:
            # the groups left cannot convict it.
            who = ", ".join(partners[culprit.name])
            finding = dataclasses.replace(
                finding,
                text=f"{finding.text}; not judged: its group(s) with {who}, lost, do not count",
                severity="not_judged",
            )
        findings.append(finding)
    line = f"under the fail line {fail_below:.4g} GB/s"
    for g in found.unexplained:
        findings.append(
            Finding.across(
                g.nodes,
                f"{op} across {'+'.join(g.nodes)}: {right[g]:.4g} GB/s, {line}; no one node, switch or link "
                "explains it",
                metric=metric,
                value=right[g],
                unit="GB/s",
            )
        )
    if found.whole_cluster_only:
        whole = plan.stage("whole cluster")[0].groups[0]
        findings.append(
            Finding.across(
                whole.nodes,
                f"{op} across all {len(whole.nodes)} nodes: {right[whole]:.4g} GB/s, {line}, while every "
                "smaller group is fast: a fault that needs the whole fabric loaded",
                metric=metric,
                value=right[whole],
                unit="GB/s",
            )
        )
    by_loss = {r.group for r in results if _lost_in(r, lost) or lost.keys() & set(r.group.nodes)} | broken
    unmeasured = [
        g for g in found.unmeasured if g not in by_loss and not any(r.group == g and r.problems for r in results)
    ]
    if unmeasured:
        nodes = tuple(dict.fromkeys(n for g in unmeasured for n in g.nodes))
        findings.append(
            Finding.across(
                nodes, f"{op}: {len(unmeasured)} group(s) of the rounds returned no result", severity="not_judged"
            )
        )
    return RoundsCheck(op, metric, plan, tuple(results), fail_below, found, tuple(findings), tuple(again))


def _partners(plan: RoundPlan, lost: Mapping[str, Lost], broken: set[Group]) -> dict[str, list[str]]:
    """The nodes whose groups a loss took from the judging, each with the lost nodes it shared
    them with: members of a group holding a lost node or measured again in a job a loss broke.
    The whole-cluster group, which every node shares, is not one of them."""
    out: dict[str, list[str]] = {}
    for number, rnd in enumerate(plan.rounds, start=1):
        if rnd.stage == "whole cluster":
            continue
        for g in rnd.groups:
            gone = [n for n in g.nodes if n in lost] or (
                [n for n, at in lost.items() if at.again and at.round == number] if g in broken else []
            )
            for n in g.nodes:
                if n not in lost and gone:
                    out.setdefault(n, [])
                    out[n] += [x for x in gone if x not in out[n]]
    return out


def _lost_in(r: GroupResult, lost: Mapping[str, Lost]) -> tuple[str, ...]:
    """The lost nodes that left ``r`` without a result: one of its own, or one lost under its
    round's job."""
    if r.busbw is not None or r.problems:
        return ()
    own = tuple(n for n in r.group.nodes if n in lost)
    return own or tuple(n for n, at in lost.items() if at.round == r.round and not at.again)


def _lost_again(r: GroupResult, lost: Mapping[str, Lost]) -> tuple[str, ...]:
    """The lost nodes that left ``r``, a group measured again, without its second result: one of
    its own, or one lost under the job that measured its round's groups again."""
    if r.busbw is not None or r.problems:
        return ()
    own = tuple(n for n in r.group.nodes if n in lost)
    return own or tuple(n for n, at in lost.items() if at.again and at.round == r.round)


def _lost_findings(
    plan: RoundPlan,
    op: str,
    results: Sequence[GroupResult],
    again: Sequence[GroupResult],
    lost: Mapping[str, Lost],
) -> list[Finding]:
    """Each lost node's finding, and the groups it left unmeasured as one finding, not judged,
    of their other nodes that names it. A node lost before the whole-cluster round leaves that
    group out: the round runs over the nodes left (``run/areas/nccl_rounds.py``), and that is
    the test's measurement; one lost under it leaves the whole cluster unmeasured."""
    last = len(plan.rounds)
    out: list[Finding] = []
    for node, at in lost.items():
        if at.again:
            left = [r for r in again if node in _lost_again(r, lost)]
            job = f"the job measuring round {at.round}'s slow groups again"
            own = f"{len(left)} group(s) were not measured again for it"
            theirs = f"{len(left)} group(s) not measured again"
            then = "; their first measurement alone names no switch or link"
        else:
            left = [r for r in results if node in _lost_in(r, lost) and (r.round < last or at.round == last)]
            job = f"round {at.round}'s job" + (" (the whole cluster)" if at.round == last else "")
            own = f"{len(left)} group(s) of the rounds were not measured for it"
            theirs = f"{len(left)} group(s) of the rounds not measured"
            then = f", the whole-cluster {op} among them" if at.round == last else ""
        out.append(Finding.on_node(node, f"{op}: {node} was lost under {job} ({at.reason}); {own}{then}"))
        others = tuple(dict.fromkeys(n for r in left for n in r.group.nodes if n not in lost))
        if others:
            out.append(
                Finding.across(
                    (*others, node),
                    f"{op}: {theirs}: {node} was lost under {job}{then}",
                    culprits=(node,),
                    severity="not_judged",
                )
            )
    return out


def _worst(by_group: Mapping[Group, float]) -> Callable[[Sequence[Group]], float | None]:

    def lowest(groups: Sequence[Group]) -> float | None:
        values = [v for g in groups if (v := by_group.get(g)) is not None]
        return min(values) if values else None

    return lowest


def _finding(
    c: Culprit,
    op: str,
    metric: str,
    worst: Callable[[Sequence[Group]], float | None],
    fail_below: float,
    parents: Mapping[str, str],
) -> Finding:
    value = worst(c.evidence)
    said = f"{op}: {c.sentence()}; lowest {value:.4g} GB/s, fail line {fail_below:.4g} GB/s"
    more: dict[str, Any] = {"metric": metric, "value": value, "unit": "GB/s"}
    if c.kind == "node":
        return Finding.on_node(c.name, said, **more)
    if c.kind == "leaf":
        return Finding.in_network("switch", (c.name,), c.nodes, said, **more)
    if c.kind == "uplinks":
        above = parents.get(c.name)
        return Finding.in_network("link", (c.name, *((above,) if above else ())), c.nodes, said, **more)
    return Finding.in_network("link", c.leaves, c.nodes, said, **more)

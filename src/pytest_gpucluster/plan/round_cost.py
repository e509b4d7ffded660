"""What the across-node rounds cost: jobs, groups and an estimate of the time, and the lines the
dry run prints.

A round is one job (its groups run at once as sub-communicators), so a round costs a job's start
(submission to the workload: scheduling, task start-up, NCCL set-up) and one sweep of the
collectives, whatever the number of groups in it. The estimate is ``rounds × (start_s + ops ×
sweep_s)``; the default seconds are assumptions a site replaces with its own measurements.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from pytest_gpucluster.config.topology import Topology
from pytest_gpucluster.plan.rounds import (
    STAGES,
    Group,
    Round,
    RoundPlan,
    Stage,
    UnplacedNodes,
    batches,
    plan_rounds,
)
from pytest_gpucluster.verdict.ranges import hostlist

# Assumed seconds, not measured on a large cluster: a job's start on many nodes, and one
# collective's across-node sweep from judge_from_bytes up.
START_S = 20.0
SWEEP_S = 5.0


@dataclass(frozen=True)
class RoundCost:
    """The plan's jobs and groups, and its time at the assumed seconds per round."""

    jobs: int
    groups: int
    round_s: float

    @property
    def estimate_s(self) -> float:
        return self.jobs * self.round_s


def cost(
    plan: RoundPlan,
    *,
    ops: int = 3,
    start_s: float = START_S,
    sweep_s: float = SWEEP_S,
    groups_at_once: int | None = None,
) -> RoundCost:
    """Jobs (one per round, more where a round has more than ``groups_at_once`` groups), groups,
    and the seconds one job is assumed to take."""
    jobs = sum(len(batches(r, groups_at_once)) for r in plan.rounds)
    return RoundCost(jobs=jobs, groups=len(plan.groups), round_s=start_s + ops * sweep_s)


def lines(plan: RoundPlan, spent: RoundCost) -> list[str]:
    """The plan as the dry run prints it: one line per stage, then the cost."""
    if not plan.has_tree:
        n = len(plan.nodes)
        return [
            f"fabric: no topology_file; one group of all {n} nodes, and a slow result is isolated by "
            f"pairing: {n // 2} neighbour pairs, then each suspect with a cleared node (2 more jobs)",
            f"fabric: {spent.jobs} job(s), about {_duration(spent.estimate_s)} "
            f"({_duration(spent.round_s)} per job assumed)",
        ]
    sizes = sorted({len(leaf.nodes) for leaf in plan.leaves})
    leaf_sizes = f"{sizes[0]}" if len(sizes) == 1 else f"{sizes[0]}–{sizes[-1]}"
    out = [
        f"fabric: {len(plan.nodes)} nodes under {len(plan.leaves)} leaves of {leaf_sizes} nodes "
        f"({plan.levels} level{'' if plan.levels == 1 else 's'} of switches)"
    ]
    first = 1
    for stage in STAGES:
        rounds = plan.stage(stage)
        if not rounds:
            continue
        last = first + len(rounds) - 1
        which = f"round {first}" if first == last else f"rounds {first}–{last}"
        out.append(f"  {which}, {stage}: {_describe(stage, rounds, len(plan.leaves))}")
        first = last + 1
    out += per_leaf(plan)
    per = "round" if spent.jobs == len(plan.rounds) else "job"
    out.append(
        f"fabric: {spent.jobs} jobs, {spent.groups} groups, about {_duration(spent.estimate_s)} "
        f"({_duration(spent.round_s)} per {per} assumed)"
    )
    return out


def per_leaf(plan: RoundPlan) -> list[str]:
    """The rounds each leaf plays, by stage: one line per kind of leaf (its size and its rounds),
    the leaves of that kind folded, so that the lines stay few at hundreds of leaves."""
    played: dict[str, Counter[Stage]] = {leaf.name: Counter() for leaf in plan.leaves}
    for rnd in plan.rounds:
        for name in {leaf for g in rnd.groups for leaf in g.leaves}:
            played[name][rnd.stage] += 1
    kinds: dict[tuple[int, tuple[int, ...]], list[str]] = {}
    for leaf in plan.leaves:
        counts = tuple(played[leaf.name][stage] for stage in STAGES)
        kinds.setdefault((len(leaf.nodes), counts), []).append(leaf.name)
    out = []
    for (size, counts), names in kinds.items():
        parts = ", ".join(f"{n} {stage}" for n, stage in zip(counts, STAGES, strict=True) if n)
        leaves = f"{len(names)} leaves" if len(names) > 1 else "1 leaf"
        nodes = f"{size} nodes" if size > 1 else "1 node"
        out.append(f"  per leaf: {sum(counts)} rounds ({parts}) for {leaves} of {nodes}: {hostlist(names)}")
    return out


def _describe(stage: Stage, rounds: tuple[Round, ...], leaves: int) -> str:
    groups = [g for r in rounds for g in r.groups]
    per_round = sorted({len(r.groups) for r in rounds})
    count = f"{per_round[0]}" if len(per_round) == 1 else f"{per_round[0]}–{per_round[-1]}"
    if stage == "between leaves":
        pairs = sorted({len({g.leaves for g in r.groups}) for r in rounds})
        met = f"{pairs[0]}" if len(pairs) == 1 else f"{pairs[0]}–{pairs[-1]}"
        return (
            f"{met} leaf pairs a round, {count} groups of {_sizes(groups)} nodes a round; "
            f"every pair of the {leaves} leaves once"
        )
    if stage == "inside leaves":
        return f"{count} groups of {_sizes(groups)} nodes, every leaf of two or more nodes at once"
    return f"one group of {len(groups[0].nodes)} nodes"


def _sizes(groups: Iterable[Group]) -> str:
    found = sorted({len(g.nodes) for g in groups})
    return f"{found[0]}" if len(found) == 1 else f"{found[0]}–{found[-1]}"


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def dry_run_lines(
    nodes: Sequence[str],
    topology: Topology | None,
    *,
    ops: int,
    groups_at_once: int | None = None,
    tree_from: str = "",
) -> list[str]:
    """The fabric rounds' lines for ``--gpucluster-dry-run``, after ``tree_from`` (where given: the
    sentence saying where the switch tree came from or why there is none); a tree that misses
    tested nodes is said in one line instead, as is a run of fewer than two nodes."""
    said = [f"fabric: {tree_from}"] if tree_from else []
    if len(set(nodes)) < 2:
        return [*said, f"fabric: {len(set(nodes))} tested node(s): no across-node rounds"]
    try:
        plan = plan_rounds(nodes, topology)
    except UnplacedNodes as exc:
        return [*said, f"fabric: cannot plan the rounds: {exc}"]
    return [*said, *lines(plan, cost(plan, ops=ops, groups_at_once=groups_at_once))]

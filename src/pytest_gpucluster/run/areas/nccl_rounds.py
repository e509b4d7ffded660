"""The across-node collectives over the switch tree: the rounds of ``plan/rounds.py`` run through
Slurm, one job per round, one after another (every round holds nearly every node); inside a job
every group is its own communicator and all run at once. ``[nccl_across] groups_at_once`` caps the
groups of one job: a larger round runs as several jobs (``plan.rounds.batches``). Each job is
bounded as every job of the run is (the profile's ``job_timeout_min``, the sweep's ``timeout_s``).

Every round sweeps the profile's collectives once, shared by each collective's test; the rounds
before the last sweep only the judged sizes (from ``judge_from_bytes`` up), the whole-cluster round
the full sweep, whose series the test shows. Before a switch or a link is named, the slow groups
that show it run once more without the rest of their round (``checks.rounds.remeasure``: one job
per round they came from, the collective being judged only). Judging is ``checks/rounds.py``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from pytest_gpucluster.checks import nccl as judging
from pytest_gpucluster.checks.rounds import GroupResult, Lost, group_results, judge_rounds, remeasure
from pytest_gpucluster.config.topology import Topology
from pytest_gpucluster.errors import NodeLostError
from pytest_gpucluster.plan.rounds import Group, Round, RoundPlan, batches, plan_rounds
from pytest_gpucluster.run.areas.nccl_jobs import inter_env, run_job, settings
from pytest_gpucluster.run.context import JobContext
from pytest_gpucluster.slurm.topology import slurm_topology
from pytest_gpucluster.workloads.busbw import SweepResult


def topology_of(ctx: JobContext) -> Topology | None:
    """The switch tree the rounds follow: the profile's ``topology_file``, else on Slurm the tree
    or blocks Slurm knows (asked once per run); None without either."""
    if ctx.profile.topology is not None:
        return ctx.profile.topology
    if ctx.profile.executor != "slurm":
        return None
    return ctx.once(("slurm", "topology"), lambda: slurm_topology(ctx.slurm), light=True)


@dataclass(frozen=True)
class RoundsRun:
    """Every round's sweeps (round number, 1-based → sweeps) and the nodes lost under them."""

    sweeps: dict[int, list[SweepResult]]
    lost: dict[str, Lost]


def run_rounds(ctx: JobContext, plan: RoundPlan, ops: tuple[str, ...]) -> RoundsRun:
    """Every round's sweeps, measured once per run. A node lost under a round's job ends that job
    without results; the later rounds run without the groups that hold it, and the whole-cluster
    round over the nodes left, so that the others are still measured."""

    def measure() -> RoundsRun:
        s = settings(ctx, across=True)
        judge_from = min(s.judge_from_bytes, s.max_bytes)
        at_most = ctx.profile.nccl_across.groups_at_once
        out: dict[int, list[SweepResult]] = {}
        lost: dict[str, Lost] = {}
        for number, rnd in enumerate(plan.rounds, start=1):
            out[number] = []
            rnd = _without(rnd, lost)
            if not rnd.groups:
                continue
            for part, job in enumerate(jobs := batches(rnd, at_most), start=1):
                name = f"round{number}" + (f".{part}" if len(jobs) > 1 else "")
                nodes = tuple(n for g in job.groups for n in g.nodes)
                try:
                    out[number] += run_job(
                        ctx,
                        f"nccl-{name}",
                        groups=[list(g.nodes) for g in job.groups],
                        ops=ops,
                        env=inter_env(ctx, name),
                        nodelist=nodes if ctx.profile.executor == "slurm" else None,
                        min_bytes=None if rnd.stage == "whole cluster" else judge_from,
                    ).sweeps
                except NodeLostError as exc:
                    lost.update({n: Lost(number, why) for n, why in exc.lost.items() if n not in lost})
        return RoundsRun(out, lost)

    return ctx.once(("nccl", "rounds", ops, plan.nodes), measure)


def _without(rnd: Round, lost: Mapping[str, Lost]) -> Round:
    """``rnd`` less the groups that hold a lost node; the whole-cluster group over the nodes left."""
    if not lost:
        return rnd
    if rnd.stage == "whole cluster":
        left = tuple(n for n in rnd.groups[0].nodes if n not in lost)
        return Round(rnd.stage, (Group(left, rnd.groups[0].leaves),) if len(left) > 1 else ())
    return Round(rnd.stage, tuple(g for g in rnd.groups if not lost.keys() & set(g.nodes)))


def rounds_check(ctx: JobContext, topology: Topology, ops: tuple[str, ...], op: str) -> judging.Check:
    """``op`` across nodes by the rounds: the whole-cluster round's check (the test's measurement
    and series) with the rounds' findings and every group's busbw on it."""
    plan = plan_rounds(ctx.live_nodes, topology)
    measured = run_rounds(ctx, plan, ops)
    metric = judging.metric_name(op, "inter_node", nvls=ctx.profile.nccl.nvls)
    threshold = ctx.thresholds.get(metric)
    s = settings(ctx, across=True)

    def busbw(sweep: SweepResult) -> float | None:
        row = sweep.judged_row(s.judge_from_bytes)
        return row.busbw if row is not None else None

    results = group_results(plan, measured.sweeps, op, busbw)
    parents = {leaf.name: p for leaf in plan.leaves if (p := topology.switches[leaf.name].parent) is not None}
    fail_below = threshold.fail_below if threshold is not None else None
    again, lost_again = measure_again(ctx, plan, remeasure(plan, results, fail_below, measured.lost), op, busbw)
    lost = {**measured.lost, **{n: at for n, at in lost_again.items() if n not in measured.lost}}
    found = judge_rounds(
        plan, results, op=op, metric=metric, fail_below=fail_below, parents=parents, again=again, lost=lost
    )
    whole = _whole(plan, measured, op)
    if whole is None:  # a node lost under the whole-cluster round: its findings say so
        return judging.with_rounds(judging.unmeasured(op, plan.nodes, metric, threshold), found)
    return judging.with_rounds(judging.make_check(whole, metric, threshold, s), found)


def measure_again(
    ctx: JobContext,
    plan: RoundPlan,
    chosen: Sequence[tuple[int, Round]],
    op: str,
    busbw: Callable[[SweepResult], float | None],
) -> tuple[tuple[GroupResult, ...], dict[str, Lost]]:
    """The groups ``remeasure`` chose, measured once more: a job per round they came from, on
    their nodes only, ``op`` alone from the judged sizes up; once per run for the same groups.
    A node lost under one of these jobs ends that job without results and is returned, lost
    (``Lost.again``); the other jobs still run."""
    if not chosen:
        return (), {}
    s = settings(ctx, across=True)
    judge_from = min(s.judge_from_bytes, s.max_bytes)

    def measure() -> tuple[dict[int, list[SweepResult]], dict[str, Lost]]:
        out: dict[int, list[SweepResult]] = {}
        lost: dict[str, Lost] = {}
        for number, rnd in chosen:
            name = f"again{number}"
            out[number] = []
            try:
                out[number] = run_job(
                    ctx,
                    f"nccl-{name}",
                    groups=[list(g.nodes) for g in rnd.groups],
                    ops=(op,),
                    env=inter_env(ctx, name),
                    nodelist=tuple(n for g in rnd.groups for n in g.nodes) if ctx.profile.executor == "slurm" else None,
                    min_bytes=judge_from,
                ).sweeps
            except NodeLostError as exc:
                lost.update({n: Lost(number, why, again=True) for n, why in exc.lost.items() if n not in lost})
        return out, lost

    sweeps, lost = ctx.once(("nccl", "again", op, tuple(chosen)), measure)
    again = RoundPlan(plan.nodes, plan.leaves, tuple(rnd for _, rnd in chosen), plan.levels)
    numbers = [number for number, _ in chosen]
    found = group_results(again, {i: sweeps[n] for i, n in enumerate(numbers, start=1)}, op, busbw)
    return tuple(dataclasses.replace(r, round=numbers[r.round - 1]) for r in found), lost


def _whole(plan: RoundPlan, measured: RoundsRun, op: str) -> SweepResult | None:
    """The whole-cluster round's sweep: over every node, or over those left after a loss; None
    where a loss left none (a node lost under that round's job: the rounds' findings name it)."""
    last = len(plan.rounds)
    nodes = tuple(n for n in plan.rounds[-1].groups[0].nodes if n not in measured.lost)
    if measured.lost and not any(s.op == op and set(s.nodes) == set(nodes) for s in measured.sweeps[last]):
        return None
    return judging.find(measured.sweeps[last], nodes, op)

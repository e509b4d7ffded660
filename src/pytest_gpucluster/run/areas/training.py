"""Training: the jobs that train the GPT-style decoder, sized by the profile's ``[training]`` table
(``workloads.training.plan_training``: the tiny CPU model on nodes without GPUs).

Each node has a job of its own, all submitted at once and watched by the telemetry sampler: every
GPU of the node trains alone (all at once), then DDP, then FSDP. The one-GPU baseline rides in
those jobs when the plan says so, else it is a job of one GPU; DDP and FSDP across every node are
one job; the stability check's long DDP run is a job per node as well. A node's failure is that
node's outcome, kept in the value, not the whole area's.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Sequence
from typing import Any, NamedTuple

from pytest_gpucluster.errors import ClusterFault, GpuClusterError
from pytest_gpucluster.launch import Job, JobSpec, TaskResult
from pytest_gpucluster.outcomes import failed
from pytest_gpucluster.plan import JobRequest, jobs
from pytest_gpucluster.run.context import JobContext
from pytest_gpucluster.run.produce import produces, spec_of
from pytest_gpucluster.workloads.telemetry import NodeTelemetry, under_telemetry
from pytest_gpucluster.workloads.training import (
    RunStats,
    TrainConfig,
    TrainingPlan,
    TrainingSummary,
    plan_training,
    stability_config,
    summarise,
    train,
)

MODES = ("ddp", "fsdp")  # what trains on all GPUs of a node, and across nodes
NODE_MODES = ("single", *MODES)  # what each node's job trains, in this order
STABILITY_MODE = "ddp"  # the stability check's long run


def plan_of(ctx: JobContext) -> TrainingPlan:
    """The profile's training sizes for these nodes."""
    return plan_training(ctx.profile.training, gpus_per_node=ctx.gpus_per_node, real_gpus=ctx.profile.gpus_are_real)


def _summaries(
    plan: TrainingPlan, results: Sequence[TaskResult[tuple[RunStats, ...]]], modes: tuple[str, ...]
) -> dict[str, TrainingSummary]:
    return {m: summarise([r.value[i] for r in results], plan.config) for i, m in enumerate(modes)}


def _raise_cluster_fault(outcomes: Iterable[object]) -> None:
    """A node's job that failed for a fault outside the nodes (the controller, the shared
    filesystem) is no judgement of that node: the fault itself ends the check, not judged."""
    for got in outcomes:
        if isinstance(got, ClusterFault):
            raise got


def _each_node(
    ctx: JobContext, name: str, request: JobRequest, plan: TrainingPlan, submit: Callable[[JobSpec], Job[Any]]
) -> tuple[dict[str, Job[Any]], dict[str, GpuClusterError]]:
    """One job per tested node (``<name>-<node>``), all submitted before any is waited on; a node
    whose job cannot be submitted (lost earlier) has its error instead."""
    submitted: dict[str, Job[Any]] = {}
    refused: dict[str, GpuClusterError] = {}
    for n in ctx.live_or_fault():
        spec = spec_of(
            ctx,
            request,
            name=f"{name}-{n}",
            nodelist=(n,),
            timeout_min=plan.timeout_min,
        )
        try:
            submitted[n] = submit(spec)
        except GpuClusterError as exc:  # a node lost earlier: that node's verdict only
            refused[n] = exc
    return submitted, refused


class NodeRun(NamedTuple):
    """One node's training job: mode → its run, the job id, what the sampler saw, and the plan's
    note (the tiny CPU model stood in) or ``""``."""

    runs: dict[str, TrainingSummary]
    job_id: str
    telemetry: list[NodeTelemetry]
    note: str


@produces(jobs.TRAIN_PER_NODE)
def per_node(ctx: JobContext) -> dict[str, NodeRun | GpuClusterError]:
    """node → its training job, or the node's error; once per run, shared by every per-node check."""

    def produce() -> dict[str, NodeRun | GpuClusterError]:
        plan = plan_of(ctx)

        def submit(spec: JobSpec) -> Job[Any]:
            return ctx.submit(
                under_telemetry, spec, fn=train, config=plan.config, modes=NODE_MODES, timeout_s=plan.timeout_s
            )

        submitted, refused = _each_node(ctx, "train", jobs.TRAIN_PER_NODE, plan, submit)
        out: dict[str, NodeRun | GpuClusterError] = dict(refused)
        for n, job in submitted.items():
            try:
                results = job.results()
            except GpuClusterError as exc:  # one node's failure is that node's verdict only
                out[n] = exc
                continue
            runs = [dataclasses.replace(r, value=r.value.value) for r in results]
            sampled = [r.value.telemetry for r in results if r.value.telemetry is not None]
            out[n] = NodeRun(_summaries(plan, runs, NODE_MODES), results[0].job_id, sampled, plan.note)
        return out

    return ctx.once(jobs.TRAIN_PER_NODE.key, produce)


# ---------------------------------------------------------------------- the one-GPU baseline


class Baselines(NamedTuple):
    """node → (one GPU training alone, job id); how the GPUs trained alone; the plan's note."""

    by_node: dict[str, tuple[TrainingSummary, str]]
    alone: str
    note: str


@produces(jobs.TRAIN_BASELINE)
def baselines(ctx: JobContext) -> Baselines:
    """Every GPU of every node alone, from the per-node jobs where the plan has the baseline ride
    in them; else one GPU of the first node in a job of its own (once per run)."""
    plan = plan_of(ctx)
    if ctx.plan.rides_in(jobs.TRAIN_BASELINE.key) is not None:
        nodes = per_node(ctx)
        found = {n: (got.runs["single"], got.job_id) for n, got in nodes.items() if isinstance(got, NodeRun)}
        if not found:
            _raise_cluster_fault(nodes.values())
            gone = "; ".join(f"{n}: {got}" for n, got in nodes.items())
            failed(f"no node trained on one GPU: every per-node training job failed ({gone})")
        return Baselines(found, "each GPU alone, all at once", plan.note)

    def produce() -> dict[str, tuple[TrainingSummary, str]]:
        spec = spec_of(
            ctx,
            jobs.TRAIN_BASELINE,
            name="train-1gpu",
            timeout_min=plan.timeout_min,
        )
        results = ctx.run(train, spec, config=plan.config, modes=("single",), timeout_s=plan.timeout_s)
        single = _summaries(plan, results, ("single",))["single"]
        return {single.nodes[0]: (single, results[0].job_id)}

    return Baselines(ctx.once(jobs.TRAIN_BASELINE.key, produce), "1 GPU alone", plan.note)


# ---------------------------------------------------------------------- across every node


class Across(NamedTuple):
    """DDP and FSDP across every node: mode → its run, the job id, the plan's note."""

    runs: dict[str, TrainingSummary]
    job_id: str
    note: str


@produces(jobs.TRAIN_ACROSS)
def across(ctx: JobContext) -> Across:
    """One job over every tested node, once per run."""

    def produce() -> Across:
        plan = plan_of(ctx)
        spec = spec_of(
            ctx,
            jobs.TRAIN_ACROSS,
            name="train-all",
            timeout_min=plan.timeout_min,
        )
        results = ctx.run(train, spec, config=plan.config, modes=MODES, timeout_s=plan.timeout_s)
        return Across(_summaries(plan, results, MODES), results[0].job_id, plan.note)

    return ctx.once(jobs.TRAIN_ACROSS.key, produce)


# ---------------------------------------------------------------------- the long run


class LongRun(NamedTuple):
    """One node's long run: every rank's RunStats and the job id."""

    runs: list[RunStats]
    job_id: str


class LongRuns(NamedTuple):
    """node → its long run or the node's error; the long run's config and the plan's note."""

    by_node: dict[str, LongRun | GpuClusterError]
    config: TrainConfig
    note: str


@produces(jobs.TRAIN_STABILITY)
def long_runs(ctx: JobContext) -> LongRuns:
    """One long DDP job per node, all submitted at once; once per run."""

    def produce() -> LongRuns:
        plan = plan_of(ctx)
        config = stability_config(plan.config)

        def submit(spec: JobSpec) -> Job[Any]:
            return ctx.submit(train, spec, config=config, modes=(STABILITY_MODE,), timeout_s=plan.timeout_s)

        submitted, refused = _each_node(ctx, "train-stability", jobs.TRAIN_STABILITY, plan, submit)
        out: dict[str, LongRun | GpuClusterError] = dict(refused)
        for n, job in submitted.items():
            try:
                results = job.results()
            except GpuClusterError as exc:
                out[n] = exc
                continue
            out[n] = LongRun([r.value[0] for r in results], results[0].job_id)
        return LongRuns(out, config, plan.note)

    return ctx.once(jobs.TRAIN_STABILITY.key, produce)

"""GPU isolation: what each task of a job sees of its node's GPUs.

On nodes of 2 GPUs or more, two jobs run at once, each holding half of every node's GPUs and
waiting (bounded) until the other runs too; the second takes one task per GPU
(``--gpus-per-task=1``) where a half has 2 GPUs or more, so on nodes of 4 GPUs or more the pair
also serves the one-GPU-per-task check. On nodes of 2 or 3 GPUs that check has a job of its own;
on nodes of one GPU, a job holding it shows what a task sees.
"""

from __future__ import annotations

import tempfile
from typing import Any, NamedTuple

from pytest_gpucluster.launch import Job
from pytest_gpucluster.outcomes import failed
from pytest_gpucluster.plan import jobs
from pytest_gpucluster.run.context import JobContext
from pytest_gpucluster.run.produce import produces, spec_of
from pytest_gpucluster.workloads.isolation import GpuView, gpu_view


class Pair(NamedTuple):
    """The two jobs that ran at once: GPUs each holds per node, each task's view, and whether the
    second ran one task per GPU."""

    half: int
    first: list[GpuView]
    second: list[GpuView]
    per_task: bool


@produces(jobs.ISOLATION_PAIR)
def pair(ctx: JobContext) -> Pair:
    """The isolation pair, once per run. Nodes that Slurm says have fewer GPUs than the pair
    needs fail the check before anything is submitted: each job would start and wait at its
    hold for the other until ``queue_timeout_s``."""
    half = ctx.gpus_per_node // 2
    per_task = half >= 2
    first = spec_of(ctx, jobs.ISOLATION_PAIR)
    second = spec_of(ctx, jobs.ISOLATION_PAIR_PER_TASK) if per_task else first
    real = ctx.profile.gpus_are_real
    short = ctx.short_of_gpus(2 * half)
    if short:
        failed(
            f"{short}; the profile's {ctx.gpus_per_node} GPUs per node make a pair of jobs of {half} "
            "GPUs each that cannot run at once there: not submitted. Fix gpus_per_node or the nodes' Gres."
        )

    def produce() -> tuple[list[GpuView], list[GpuView]]:
        with tempfile.TemporaryDirectory(prefix="isolation-", dir=ctx.job_root) as root:

            def submit_pair() -> list[Job[Any]]:
                hold = tempfile.mkdtemp(dir=root)  # each try its own: a cancelled job's mark says nothing
                return [
                    ctx.submit(gpu_view, first, real=real, hold_dir=hold, hold_as="a", hold_for="b"),
                    ctx.submit(gpu_view, second, real=real, hold_dir=hold, hold_as="b", hold_for="a"),
                ]

            results_a, results_b = ctx.run_together(submit_pair)
            return [r.value for r in results_a], [r.value for r in results_b]

    return Pair(half, *ctx.once(jobs.ISOLATION_PAIR.key, produce), per_task)


@produces(jobs.ISOLATION_VIEW)
def view(ctx: JobContext) -> list[GpuView]:
    """Every node, a job holding its one GPU: each task's view, once per run."""
    spec = spec_of(ctx, jobs.ISOLATION_VIEW)
    real = ctx.profile.gpus_are_real
    return ctx.once(jobs.ISOLATION_VIEW.key, lambda: [r.value for r in ctx.run(gpu_view, spec, real=real)])


@produces(jobs.ISOLATION_PER_TASK)
def per_task(ctx: JobContext) -> tuple[int, list[GpuView]]:
    """(tasks per node, each task's view) of a job of one task per GPU with ``--gpus-per-task=1``:
    the pair's second job where it ran so, else a job of its own (once per run)."""
    if ctx.gpus_per_node >= 4:
        p = pair(ctx)
        return p.half, p.second
    spec = spec_of(ctx, jobs.ISOLATION_PER_TASK)
    real = ctx.profile.gpus_are_real
    views = ctx.once(jobs.ISOLATION_PER_TASK.key, lambda: [r.value for r in ctx.run(gpu_view, spec, real=real)])
    return spec.tasks_per_node, views

"""Training, judged on the login node: from the runs ``workloads.training.summarise`` made of the
tasks' results, the one-GPU baseline a scaling efficiency divides by, the measurements of a run's
speed, what is recorded of a run, and whether DDP and FSDP agree.

Scaling efficiency is a run's tokens/s per GPU over one GPU's alone, in percent. The one GPU is
the node's own GPUs trained alone where they were (each per-node job first trains every GPU of its
node alone, all at once), else the median node's; a run of one GPU has nothing to scale to.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

from pytest_gpucluster.verdict import Measurement
from pytest_gpucluster.workloads.training import TrainingSummary, loss_agreement

TINY_NOTE = " (tiny CPU model: no GPUs)"


class Baseline(NamedTuple):
    """One GPU training alone: its run, the job it ran in, and what it is (``node1, 1 GPU alone``)."""

    summary: TrainingSummary
    job_id: str
    what: str


def baseline_for(by_node: Mapping[str, tuple[TrainingSummary, str]], alone: str, node: str | None = None) -> Baseline:
    """The baseline for ``node``: its own GPUs alone where they were measured, else the median
    node's of ``by_node`` (node → (one-GPU run, job id)). ``alone`` says how the GPUs trained."""
    if node is not None and node in by_node:
        return Baseline(*by_node[node], f"{node}, {alone}")
    ordered = sorted(by_node.values(), key=lambda b: b[0].tokens_per_s_per_gpu)
    base, job = ordered[(len(ordered) - 1) // 2]
    return Baseline(base, job, f"{base.nodes[0]}{' (the median node)' if len(ordered) > 1 else ''}, {alone}")


def detail(run: TrainingSummary, *, tiny: bool) -> str:
    """What ran: GPUs, device and dtype; ``tiny``: the tiny CPU model stood in for the profile's."""
    return f"{run.world_size} × {run.device_name}, {run.dtype}{TINY_NOTE if tiny else ''}"


def records(run: TrainingSummary, where: str) -> list[tuple[str, dict[str, Any]]]:
    """``record(kind, **fields)`` payloads of a run: its loss curve and its numbers."""
    return [
        (
            "series",
            {
                "name": f"train.{run.mode}.loss",
                "where": where,
                "x_label": "step",
                "y_label": "loss",
                "points": [[i, v] for i, v in enumerate(run.losses)],
            },
        ),
        (
            "training",
            {
                "mode": run.mode,
                "where": where,
                "gpus": run.world_size,
                "tokens_per_s_per_gpu": run.tokens_per_s_per_gpu,
                "mfu_percent": run.mfu_percent,
                "step_p50_s": run.step_p50_s,
                "step_p95_s": run.step_p95_s,
                "peak_memory_gib": run.peak_memory_gib,
                "params": run.n_params,
            },
        ),
    ]


def scaling_series(run: TrainingSummary, base: Baseline, where: str, fail_below: float | None) -> dict[str, Any] | None:
    """The ``record("series", ...)`` payload of a run's scaling (one GPU, then the run's), or None
    for a run of one GPU."""
    if run.world_size < 2:
        return None
    return {
        "name": f"train.{run.mode}.scaling",
        "where": where,
        "x_label": "GPUs",
        "y_label": "tokens/s per GPU",
        "points": [[1, base.summary.tokens_per_s_per_gpu], [run.world_size, run.tokens_per_s_per_gpu]],
        "threshold": fail_below,
    }


def speed(run: TrainingSummary, base: Baseline, where: str, job: str, *, tiny: bool) -> list[Measurement]:
    """tokens/s per GPU and scaling efficiency of ``run``. A run of one GPU has no scaling: only
    its tokens/s are measured, and the detail says why."""
    what = detail(run, tiny=tiny)
    metric = f"train.{run.mode}.tokens_per_s_per_gpu"
    if run.world_size < 2:
        note = f"{what}; scaling efficiency not judged: 1 GPU in the run, nothing to scale to"
        return [Measurement(metric, run.tokens_per_s_per_gpu, "tokens/s", where, note, job)]
    one = base.summary.tokens_per_s_per_gpu
    return [
        Measurement(metric, run.tokens_per_s_per_gpu, "tokens/s", where, what, job),
        Measurement(
            f"train.{run.mode}.scaling_efficiency",
            100.0 * run.tokens_per_s_per_gpu / one,
            "%",
            where,
            f"{what}; one GPU ({base.what}): {one:.0f} tokens/s",
            job,
        ),
    ]


def disagreement(ddp: TrainingSummary, fsdp: TrainingSummary) -> list[str]:
    """The problem when DDP and FSDP, trained from the same weights and data, end at final losses
    further apart than their dtype allows (``workloads.training.loss_agreement``)."""
    rel, tol = loss_agreement(ddp, fsdp)
    if rel <= tol:
        return []
    return [
        f"final losses DDP {ddp.losses[-1]:.5f} and FSDP {fsdp.losses[-1]:.5f} differ "
        f"by {rel:.2e} relative; {ddp.dtype} allows {tol:g}"
    ]

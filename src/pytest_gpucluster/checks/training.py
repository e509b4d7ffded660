"""Training, judged on the login node: from the runs ``workloads.training.summarise`` made of the
tasks' results, the one-GPU baseline a scaling efficiency divides by, the measurements of a run's
speed, what is recorded of a run, and its problems as findings: whether it trained correctly and
whether DDP and FSDP agree.

Scaling efficiency is a run's tokens/s per GPU over one GPU's alone, in percent. The one GPU is
the node's own GPUs trained alone where they were (each per-node job first trains every GPU of its
node alone, all at once), else the median node's; a run of one GPU has nothing to scale to.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

from pytest_gpucluster.checks.places import gpu_index, of_nodes
from pytest_gpucluster.verdict import Finding, Measurement
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


def count_words(n: int) -> str:
    """A parameter count as people write it: 1.3 B, 125 M, 207 k, 950."""
    for scale, word in ((1e9, "B"), (1e6, "M"), (1e3, "k")):
        if n >= scale:
            return f"{n / scale:.3g} {word}"
    return str(n)


def detail(run: TrainingSummary, *, tiny: bool) -> str:
    """What ran: nodes and GPUs, device and dtype (``2 × NVIDIA H200, bf16`` on one node,
    ``2 nodes × 2 × NVIDIA H200, bf16`` across nodes, so an across-node figure never reads as a
    node's); ``tiny``: the tiny CPU model stood in for the profile's."""
    nodes = len(run.nodes)
    if nodes < 2:
        gpus = f"{run.world_size} × {run.device_name}"
    elif run.world_size % nodes == 0:  # the across-node job places as many tasks on every node
        gpus = f"{nodes} nodes × {run.world_size // nodes} × {run.device_name}"
    else:
        gpus = f"{run.world_size} × {run.device_name} on {nodes} nodes"
    return f"{gpus}, {run.dtype}{TINY_NOTE if tiny else ''}"


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


def measured(metric: str, value: float, unit: str, run: TrainingSummary, detail: str, job: str) -> Measurement:
    """A measurement of ``run``: of its node, or of its nodes together."""
    if len(run.nodes) == 1:
        return Measurement.at(metric, value, unit, run.nodes[0], detail=detail, job_id=job)
    return Measurement.across(metric, value, unit, run.nodes, detail=detail, job_id=job)


def speed(run: TrainingSummary, base: Baseline, job: str, *, tiny: bool) -> list[Measurement]:
    """tokens/s per GPU and scaling efficiency of ``run``, each of its node or its nodes together.
    A run of one GPU has no scaling: only its tokens/s are measured, and the detail says why."""
    what = detail(run, tiny=tiny)
    metric = f"train.{run.mode}.tokens_per_s_per_gpu"
    if run.world_size < 2:
        note = f"{what}; scaling efficiency not judged: 1 GPU in the run, nothing to scale to"
        return [measured(metric, run.tokens_per_s_per_gpu, "tokens/s", run, note, job)]
    one = base.summary.tokens_per_s_per_gpu
    return [
        measured(metric, run.tokens_per_s_per_gpu, "tokens/s", run, what, job),
        measured(
            f"train.{run.mode}.scaling_efficiency",
            100.0 * run.tokens_per_s_per_gpu / one,
            "%",
            run,
            f"{what}; one GPU ({base.what}): {one:.0f} tokens/s",
            job,
        ),
    ]


def correctness_findings(run: TrainingSummary, *, prefix: str = "") -> list[Finding]:
    """``run``'s problems (``workloads.training.summarise``), each sentence after ``prefix``:

    * a loss gone non-finite first, at an earlier step than on some other rank, is its rank's
      GPU's; a later one (what the all-reduce spread) names the run's nodes with those as the
      culprits; where every rank went wrong at one step, none of them is told apart;
    * replicas that differ are their two ranks' node's, or those nodes' together (either may be
      wrong);
    * the rest (loss did not fall, mixed GPU models) is the run's: its node, or its nodes together.
    """
    losses = [p for p in run.problems if p.step is not None]
    first = min((p.step for p in losses if p.step is not None), default=None)
    early = [p for p in losses if p.step == first]
    told_apart = len(early) < run.world_size
    culprits = [p.ranks[0][0] for p in early] if told_apart else []
    found = []
    for p in run.problems:
        text = prefix + p.text
        if p in early and told_apart:
            node, label = p.ranks[0]
            found.append(Finding.on_node(node, text, gpu=gpu_index(label)))
        elif p in losses:
            found.append(of_nodes(run.nodes, text, culprits=culprits))
        else:
            found.append(of_nodes([n for n, _ in p.ranks] or run.nodes, text))
    return found


def disagreement(ddp: TrainingSummary, fsdp: TrainingSummary) -> list[Finding]:
    """A failure of the run's node (or nodes together) when DDP and FSDP, trained from the same
    weights and data, end at final losses further apart than their dtype allows
    (``workloads.training.loss_agreement``)."""
    rel, tol = loss_agreement(ddp, fsdp)
    if rel <= tol:
        return []
    text = (
        f"final losses DDP {ddp.losses[-1]:.5f} and FSDP {fsdp.losses[-1]:.5f} differ "
        f"by {rel:.2e} relative; {ddp.dtype} allows {tol:g}"
    )
    return [of_nodes(ddp.nodes, text)]

"""Training: a GPT-style decoder trains correctly and fast enough
on one GPU, on every node's GPUs under DDP and FSDP2, and across all nodes.

Correct: loss finite and falling, DDP replicas bit-identical, DDP and FSDP reaching the same loss.
Fast: tokens/s per GPU, MFU and scaling efficiency (per-GPU throughput at scale ÷ one GPU alone)
against thresholds.toml. Each node's job first trains every GPU alone, all at once, then DDP, then
FSDP: the baseline comes from the same GPUs under the same load, without a job of its own. Sizes
come from the profile's [training] table; on nodes without GPUs the tiny CPU model stands in (the
rule is in workloads/training.py: plan_training).
"""

from __future__ import annotations

import dataclasses

import pytest

from pytest_gpucluster.checks import telemetry
from pytest_gpucluster.errors import ClusterFault, GpuClusterError
from pytest_gpucluster.outcomes import not_applicable
from pytest_gpucluster.plan import jobs
from pytest_gpucluster.verdict import Measurement
from pytest_gpucluster.workloads.telemetry import under_telemetry
from pytest_gpucluster.workloads.training import TrainingSummary, loss_agreement, plan_training, summarise, train

MODES = ["ddp", "fsdp"]
NODE_MODES = ("single", *MODES)  # what each node's job trains, in this order


def _plan(gpucluster):
    return plan_training(
        gpucluster.profile.training, gpus_per_node=gpucluster.gpus_per_node, real_gpus=gpucluster.profile.gpus_are_real
    )


def _summaries(gpucluster, plan, results, modes):
    return {m: summarise([r.value[i] for r in results], plan.config) for i, m in enumerate(modes)}, results[0].job_id


def _singles_in_node_jobs(gpucluster):
    """True when the plan takes the one-GPU baseline from the per-node training jobs: each of them
    first trains every GPU of its node alone (all at once); no job of its own is needed."""
    return gpucluster.plan.rides_in(jobs.TRAIN_BASELINE.key) is not None


def _baselines(gpucluster):
    """node → (one-GPU summary, job id): every GPU of every node alone, from the per-node jobs;
    or, when no per-node training test runs, one GPU of the first node in a job of its own."""
    if _singles_in_node_jobs(gpucluster):
        jobs = _per_node_jobs(gpucluster)
        found = {n: (got[0]["single"], got[1]) for n, got in jobs.items() if isinstance(got, tuple)}
        if not found:
            _raise_cluster_fault(jobs.values())
            failed = "; ".join(f"{n}: {got}" for n, got in jobs.items())
            pytest.fail(f"no node trained on one GPU: every per-node training job failed ({failed})", pytrace=False)
        return found

    def produce():
        plan = _plan(gpucluster)
        spec = gpucluster.spec(
            "train-1gpu",
            nodes=1,
            tasks_per_node=1,
            gpus_per_node=min(1, plan.gpus_per_node),
            timeout_min=plan.timeout_min,
        )
        results = gpucluster.run(train, spec, config=plan.config, modes=("single",), timeout_s=plan.timeout_s)
        summaries, job = _summaries(gpucluster, plan, results, ["single"])
        return {summaries["single"].nodes[0]: (summaries["single"], job)}

    return gpucluster.once("train.baseline", produce)


def _baseline(gpucluster, node=None):
    """(summary, job id, what it is) of the one-GPU baseline a scaling efficiency divides by:
    ``node``'s own GPUs alone where they were measured, else the median node's."""
    bases = _baselines(gpucluster)
    alone = "each GPU alone, all at once" if _singles_in_node_jobs(gpucluster) else "1 GPU alone"
    if node in bases:
        return (*bases[node], f"{node}, {alone}")
    ordered = sorted(bases.values(), key=lambda b: b[0].tokens_per_s_per_gpu)
    base, job = ordered[(len(ordered) - 1) // 2]
    return base, job, f"{base.nodes[0]}{' (the median node)' if len(ordered) > 1 else ''}, {alone}"


def _per_node_jobs(gpucluster):
    """Each GPU alone, then DDP, then FSDP on all GPUs of each node: one job per node, all
    submitted at once, each watched by the telemetry sampler (its first task samples the node
    while it trains). node → (mode → summary, job id, telemetry) or the node's error."""

    def produce():
        plan = _plan(gpucluster)
        specs = {
            n: gpucluster.spec(
                f"train-{n}",
                nodelist=(n,),
                tasks_per_node=plan.ranks_per_node,
                gpus_per_node=plan.gpus_per_node,
                timeout_min=plan.timeout_min,
            )
            for n in gpucluster.nodes
        }
        jobs, out = {}, {}
        for n, spec in specs.items():
            try:
                jobs[n] = gpucluster.submit(
                    under_telemetry, spec, fn=train, config=plan.config, modes=NODE_MODES, timeout_s=plan.timeout_s
                )
            except GpuClusterError as exc:  # a node lost earlier: that node's verdict only
                out[n] = exc
        for n, job in jobs.items():
            try:
                results = job.results()
            except GpuClusterError as exc:  # one node's failure is that node's verdict only
                out[n] = exc
                continue
            runs = [dataclasses.replace(r, value=r.value.value) for r in results]
            sampled = [r.value.telemetry for r in results if r.value.telemetry is not None]
            out[n] = (*_summaries(gpucluster, plan, runs, NODE_MODES), sampled)
        return out

    return gpucluster.once("train.per_node", produce)


PER_NODE = pytest.mark.uses(jobs.TRAIN_PER_NODE)
BASELINE = pytest.mark.uses(jobs.TRAIN_BASELINE)


@pytest.fixture
def node_training(gpucluster, node):
    """``node``'s training job: (mode → summary, job id, telemetry samples)."""
    got = _per_node_jobs(gpucluster).get(node)
    _raise_cluster_fault([got])
    if isinstance(got, Exception) or got is None:
        pytest.fail(f"{node}: training job failed: {got}", pytrace=False)
    return got


def _raise_cluster_fault(outcomes):
    """A node's job that failed for a fault outside the nodes (the controller, the shared
    filesystem) is no judgement of that node: the fault itself ends the check, not judged."""
    for got in outcomes:
        if isinstance(got, ClusterFault):
            raise got


def _training_telemetry(gpucluster, node, node_training, record):
    """What the sampler saw on ``node`` while it trained; its series are recorded."""
    _, job, sampled = node_training
    mine = [t for t in sampled if t.node == node]
    if not mine:
        pytest.fail(f"job {job}: no telemetry came back from {node} while it trained", pytrace=False)
    # Recorded once per node, by the first of its telemetry tests that runs.
    series = telemetry.series_records(mine, prefix="telemetry.training")
    gpucluster.once(("telemetry-series", "training", node), lambda: [record("series", **s) for s in series])
    return mine[0], job


def _across_nodes(gpucluster):
    def produce():
        plan = _plan(gpucluster)
        spec = gpucluster.spec(
            "train-all",
            all_nodes=True,
            tasks_per_node=plan.ranks_per_node,
            gpus_per_node=plan.gpus_per_node,
            timeout_min=plan.timeout_min,
        )
        results = gpucluster.run(train, spec, config=plan.config, modes=tuple(MODES), timeout_s=plan.timeout_s)
        return _summaries(gpucluster, plan, results, MODES)

    return gpucluster.once("train.all_nodes", produce)


def _detail(run: TrainingSummary, gpucluster) -> str:
    note = " (tiny CPU model: no GPUs)" if _plan(gpucluster).note else ""
    return f"{run.world_size} × {run.device_name}, {run.dtype}{note}"


def _record(record, run: TrainingSummary, where: str) -> None:
    record(
        "series",
        name=f"train.{run.mode}.loss",
        where=where,
        x_label="step",
        y_label="loss",
        points=[[i, v] for i, v in enumerate(run.losses)],
    )
    record(
        "training",
        mode=run.mode,
        where=where,
        gpus=run.world_size,
        tokens_per_s_per_gpu=run.tokens_per_s_per_gpu,
        mfu_percent=run.mfu_percent,
        step_p50_s=run.step_p50_s,
        step_p95_s=run.step_p95_s,
        peak_memory_gib=run.peak_memory_gib,
        params=run.n_params,
    )


def _speed(run, baseline, where, job, gpucluster, thresholds, record):
    """tokens/s per GPU and scaling efficiency of ``run`` as measurements (scaling series recorded).
    A run of one GPU has no scaling: only its tokens/s are judged, and the detail says why."""
    base, _, alone = baseline
    if run.world_size < 2:
        detail = f"{_detail(run, gpucluster)}; scaling efficiency not judged: 1 GPU in the run, nothing to scale to"
        return [
            Measurement(
                f"train.{run.mode}.tokens_per_s_per_gpu", run.tokens_per_s_per_gpu, "tokens/s", where, detail, job
            )
        ]
    eff = 100.0 * run.tokens_per_s_per_gpu / base.tokens_per_s_per_gpu
    record(
        "series",
        name=f"train.{run.mode}.scaling",
        where=where,
        x_label="GPUs",
        y_label="tokens/s per GPU",
        points=[[1, base.tokens_per_s_per_gpu], [run.world_size, run.tokens_per_s_per_gpu]],
        threshold=getattr(thresholds.get(f"train.{run.mode}.tokens_per_s_per_gpu"), "fail_below", None),
    )
    detail = _detail(run, gpucluster)
    tps = run.tokens_per_s_per_gpu
    return [
        Measurement(f"train.{run.mode}.tokens_per_s_per_gpu", tps, "tokens/s", where, detail, job),
        Measurement(
            f"train.{run.mode}.scaling_efficiency",
            eff,
            "%",
            where,
            f"{detail}; one GPU ({alone}): {base.tokens_per_s_per_gpu:.0f} tokens/s",
            job,
        ),
    ]


@BASELINE
def test_training_one_gpu(gpucluster, judge, record):
    bases = _baselines(gpucluster)
    for node, (base, _) in bases.items():
        _record(record, base, node)
    base, _, _ = _baseline(gpucluster)
    record(
        "environment",
        facts={
            "training_model": _plan(gpucluster).note
            or f"{base.n_params / 1e6:.0f} M parameters, {base.dtype} on {base.device_name}"
        },
    )
    problems = [f"{node} (job {job}): {p}" for node, (b, job) in bases.items() for p in b.problems]
    judge.problems(problems, f"training on one GPU of {', '.join(bases)} is not correct")


@pytest.mark.parametrize("mode", MODES)
@PER_NODE
@BASELINE
def test_training_on_node(gpucluster, judge, record, thresholds, node, mode, node_training):
    runs, job, _ = node_training
    _record(record, runs[mode], node)
    judge.problems(list(runs[mode].problems), f"job {job}: {mode} training on {node} is not correct")
    judge.all(_speed(runs[mode], _baseline(gpucluster, node), node, job, gpucluster, thresholds, record))


@pytest.mark.parametrize("mode", MODES)
@PER_NODE
def test_training_mfu_on_node(gpucluster, judge, node, mode, node_training):
    runs, job, _ = node_training
    run = runs[mode]
    if run.mfu_percent is None and run.dtype != "bf16":
        not_applicable(f"{node} trains in fp32 on the CPU: MFU is a fraction of a GPU's bf16 peak")
    if run.mfu_percent is None:
        pytest.skip(
            f"{node}: MFU not judged: no bf16 peak is known for {run.device_name!r}; "
            "add it to workloads/flops.py PEAK_BF16_TFLOPS"
        )
    judge(
        Measurement(
            f"train.{mode}.mfu",
            run.mfu_percent,
            "%",
            node,
            f"{_detail(run, gpucluster)}, peak {run.peak_tflops:g} TFLOP/s",
            job,
        )
    )


@PER_NODE
def test_node_was_watched_while_training(gpucluster, judge, record, node, node_training):
    nt, job = _training_telemetry(gpucluster, node, node_training, record)
    problems = [
        f"{node}: {len(s)} {name} samples in {nt.wall_s:.1f} s at {nt.interval_s} s intervals"
        for name, s in nt.node_series.items()
        if len(s) < 2
    ]
    judge.problems(problems, f"job {job}: the telemetry sampler did not run while {node} trained")


def _gpus_sampled(nt, job, judge):
    """The check fails naming the node and the sampler's error when its GPU series are empty
    (these checks run only where the GPUs are devices)."""
    judge.problems(telemetry.empty_gpu_series_problems([nt]), f"job {job}: no GPU telemetry to judge on {nt.node}")


@pytest.mark.gpu(2)  # peers on the node: with one GPU there is nothing to idle beside
@PER_NODE
def test_no_gpu_idles_while_its_peers_train(gpucluster, judge, record, node, node_training):
    nt, job = _training_telemetry(gpucluster, node, node_training, record)
    _gpus_sampled(nt, job, judge)
    fractions = telemetry.idle_fractions(telemetry.absolute_util([nt]))
    judge.problems(telemetry.unjudged_idle(fractions), f"job {job}: on {node}, idleness not measured while training")
    judge.all(
        [
            Measurement(
                "telemetry.gpu_idle_fraction", f.percent, "%", where=w, detail=f"training; {f.detail}", job_id=job
            )
            for w, f in sorted(fractions.items())
        ]
    )


@pytest.mark.gpu
@PER_NODE
def test_no_gpu_throttles_while_training(gpucluster, judge, record, node, node_training):
    nt, job = _training_telemetry(gpucluster, node, node_training, record)
    _gpus_sampled(nt, job, judge)
    judge.problems(telemetry.throttle_problems([nt]), f"job {job}: on {node}, GPU clocks slowed down while training")


@PER_NODE
def test_ddp_and_fsdp_agree(judge, node, node_training):
    runs, job, _ = node_training
    ddp, fsdp = runs["ddp"], runs["fsdp"]
    rel, tol = loss_agreement(ddp, fsdp)
    problems = (
        []
        if rel <= tol
        else [
            f"final losses DDP {ddp.losses[-1]:.5f} and FSDP {fsdp.losses[-1]:.5f} differ "
            f"by {rel:.2e} relative; {ddp.dtype} allows {tol:g}"
        ]
    )
    judge.problems(problems, f"job {job}: on {node}, DDP and FSDP trained from the same weights and data disagree")


@pytest.mark.across_nodes
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.uses(jobs.TRAIN_ACROSS)
@BASELINE
def test_training_across_nodes(gpucluster, judge, record, thresholds, mode):
    runs, job = _across_nodes(gpucluster)
    where = f"{len(runs[mode].nodes)} nodes"
    _record(record, runs[mode], where)
    nodes = ", ".join(runs[mode].nodes)
    judge.problems(list(runs[mode].problems), f"job {job}: {mode} training across {nodes} is not correct")
    judge.all(_speed(runs[mode], _baseline(gpucluster), where, job, gpucluster, thresholds, record))

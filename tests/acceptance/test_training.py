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

import pytest

from pytest_gpucluster.checks import telemetry
from pytest_gpucluster.checks import training as training_checks
from pytest_gpucluster.errors import ClusterFault
from pytest_gpucluster.outcomes import not_applicable
from pytest_gpucluster.plan import jobs
from pytest_gpucluster.run.areas.training import MODES

PER_NODE = pytest.mark.uses(jobs.TRAIN_PER_NODE)
BASELINE = pytest.mark.uses(jobs.TRAIN_BASELINE)


@pytest.fixture
def node_training(measured, node):
    """``node``'s training job (``run.areas.training.NodeRun``): mode → run, job id, telemetry."""
    got = measured(jobs.TRAIN_PER_NODE).get(node)
    if isinstance(got, ClusterFault):
        raise got  # the controller or the shared filesystem, not the node: not judged
    if isinstance(got, Exception) or got is None:
        pytest.fail(f"{node}: training job failed: {got}", pytrace=False)
    return got


def _training_telemetry(node, node_training, record):
    """What the sampler saw on ``node`` while it trained; its series are recorded on the first of
    the node's telemetry checks that runs."""
    mine = [t for t in node_training.telemetry if t.node == node]
    if not mine:
        pytest.fail(f"job {node_training.job_id}: no telemetry came back from {node} while it trained", pytrace=False)
    for s in telemetry.series_records(mine, prefix="telemetry.training"):
        record("series", once=(s["name"], s["where"]), **s)
    return mine[0], node_training.job_id


def _record(record, run, where):
    for kind, fields in training_checks.records(run, where):
        record(kind, **fields)


def _judge_speed(judge, record, cluster, run, base, where, job, note):
    """tokens/s per GPU and scaling efficiency of ``run`` against ``base`` (scaling series recorded)."""
    bound = cluster.thresholds.get(f"train.{run.mode}.tokens_per_s_per_gpu")
    series = training_checks.scaling_series(run, base, where, getattr(bound, "fail_below", None))
    if series is not None:
        record("series", **series)
    judge.all(training_checks.speed(run, base, job, tiny=bool(note)))


@BASELINE
def test_training_one_gpu(measured, judge, record):
    bases = measured()
    for node, (base, _) in bases.by_node.items():
        _record(record, base, node)
    base = training_checks.baseline_for(bases.by_node, bases.alone).summary
    record(
        "environment",
        facts={
            "training_model": bases.note
            or f"{training_checks.count_words(base.n_params)} parameters, {base.dtype} on {base.device_name}"
        },
    )
    found = [
        f
        for node, (b, job) in bases.by_node.items()
        for f in training_checks.correctness_findings(b, prefix=f"{node} (job {job}): ")
    ]
    judge.findings(found, f"training on one GPU of {', '.join(bases.by_node)} is not correct")


@pytest.mark.parametrize("mode", MODES)
@PER_NODE
@BASELINE
def test_training_on_node(cluster, measured, judge, record, node, mode, node_training):
    run, job = node_training.runs[mode], node_training.job_id
    _record(record, run, node)
    judge.findings(training_checks.correctness_findings(run), f"job {job}: {mode} training on {node} is not correct")
    bases = measured(jobs.TRAIN_BASELINE)
    base = training_checks.baseline_for(bases.by_node, bases.alone, node)
    _judge_speed(judge, record, cluster, run, base, node, job, node_training.note)


@pytest.mark.parametrize("mode", MODES)
@PER_NODE
def test_training_mfu_on_node(judge, node, mode, node_training):
    run = node_training.runs[mode]
    if run.mfu_percent is None and run.dtype != "bf16":
        not_applicable(f"{node} trains in fp32 on the CPU: MFU is a fraction of a GPU's bf16 peak")
    if run.mfu_percent is None:
        pytest.skip(
            f"{node}: MFU not judged: no bf16 peak is known for {run.device_name!r}; "
            "add it to workloads/flops.py PEAK_BF16_TFLOPS"
        )
    detail = training_checks.detail(run, tiny=bool(node_training.note))
    judge(
        training_checks.measured(
            f"train.{mode}.mfu",
            run.mfu_percent,
            "%",
            run,
            f"{detail}, peak {run.peak_tflops:g} TFLOP/s",
            node_training.job_id,
        )
    )


@PER_NODE
def test_node_was_watched_while_training(judge, record, node, node_training):
    nt, job = _training_telemetry(node, node_training, record)
    judge.findings(
        telemetry.sampling_findings(nt), f"job {job}: the telemetry sampler did not run while {node} trained"
    )


def _gpus_sampled(nt, job, judge):
    """The check fails naming the node and the sampler's error when its GPU series are empty
    (these checks run only where the GPUs are devices)."""
    judge.findings(telemetry.empty_gpu_series_findings([nt]), f"job {job}: no GPU telemetry to judge on {nt.node}")


@pytest.mark.gpu(2)  # peers on the node: with one GPU there is nothing to idle beside
@PER_NODE
def test_no_gpu_idles_while_its_peers_train(judge, record, node, node_training):
    nt, job = _training_telemetry(node, node_training, record)
    _gpus_sampled(nt, job, judge)
    fractions = telemetry.idle_fractions(telemetry.absolute_util([nt]))
    judge.findings(telemetry.unjudged_idle(fractions), f"job {job}: on {node}, idleness not measured while training")
    judge.all([f.measurement("training", job) for _, f in sorted(fractions.items())])


@pytest.mark.gpu
@PER_NODE
def test_no_gpu_throttles_while_training(judge, record, node, node_training):
    nt, job = _training_telemetry(node, node_training, record)
    _gpus_sampled(nt, job, judge)
    judge.findings(telemetry.throttle_findings([nt]), f"job {job}: on {node}, GPU clocks slowed down while training")


@PER_NODE
def test_ddp_and_fsdp_agree(judge, node, node_training):
    found = training_checks.disagreement(node_training.runs["ddp"], node_training.runs["fsdp"])
    judge.findings(
        found, f"job {node_training.job_id}: on {node}, DDP and FSDP trained from the same weights and data disagree"
    )


@pytest.mark.across_nodes
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.uses(jobs.TRAIN_ACROSS)
@BASELINE
def test_training_across_nodes(cluster, measured, judge, record, mode):
    across = measured(jobs.TRAIN_ACROSS)
    run, job = across.runs[mode], across.job_id
    where = f"{len(run.nodes)} nodes"
    _record(record, run, where)
    found = training_checks.correctness_findings(run)
    judge.findings(found, f"job {job}: {mode} training across {', '.join(run.nodes)} is not correct")
    bases = measured(jobs.TRAIN_BASELINE)
    base = training_checks.baseline_for(bases.by_node, bases.alone)
    _judge_speed(judge, record, cluster, run, base, where, job, across.note)

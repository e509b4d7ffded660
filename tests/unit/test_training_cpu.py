"""The training workload on the CPU, in-process: a tiny model trains (loss falls), and the pure
summary finds non-finite losses, flat losses and diverged DDP replicas, naming node and GPU."""

from __future__ import annotations

import math
import os
import tomllib
from dataclasses import replace
from pathlib import Path

import pytest

from pytest_gpucluster.checks import training as training_checks
from pytest_gpucluster.workloads.context import local_context
from pytest_gpucluster.workloads.training import (
    CPU_RANKS_PER_NODE,
    TINY,
    RunStats,
    TrainConfig,
    cpu_threads,
    loss_agreement,
    percentile,
    plan_training,
    summarise,
    train,
)

ROOT = Path(__file__).resolve().parents[2]


def _stats(rank: int, losses, *, node="n1", mismatches=(), name="NVIDIA H200", dtype="bf16") -> RunStats:
    return RunStats(
        mode="ddp",
        rank=rank,
        world_size=2,
        node=node,
        gpu=f"gpu{rank}",
        device_name=name,
        dtype=dtype,
        compiled=False,
        n_params=940_640_256,
        tokens_per_step=8192,
        step_times_s=(0.1, 0.1, 0.12),
        elapsed_s=0.32,
        losses=tuple(losses),
        peak_memory_bytes=2**30 * (rank + 1),
        replica_mismatches=tuple(mismatches),
    )


def test_tiny_model_trains_on_cpu_and_loss_falls():
    (run,) = train(local_context(), config=TINY, modes=("single",))
    assert run.mode == "single" and run.dtype == "fp32" and run.gpu == "cpu0"
    assert len(run.losses) == TINY.warmup_steps + TINY.steps and len(run.step_times_s) == TINY.steps
    assert all(math.isfinite(v) for v in run.losses)
    summary = summarise([run], TINY)
    assert summary.problems == ()
    assert summary.losses[-1] < 0.9 * summary.losses[0]
    assert summary.tokens_per_s_per_gpu > 0 and summary.mfu_percent is None  # no bf16 peak for a CPU


def test_same_seed_same_losses():
    cfg = replace(TINY, steps=2, warmup_steps=1)
    (a,) = train(local_context(), config=cfg, modes=("single",))
    (b,) = train(local_context(), config=cfg, modes=("single",))
    assert a.losses == b.losses


def test_tiny_sizes_are_the_ci_profile_sizes():
    ci = tomllib.loads((ROOT / "thresholds.toml").read_text())["profiles"]["ci"]["training"]
    sizes = {k: v for k, v in ci.items() if k != "timeout_s"}
    assert {k: getattr(TINY, k) for k in sizes} == sizes


def test_cpu_rule_replaces_only_the_gpu_default():
    plan = plan_training(TrainConfig(), gpus_per_node=0, real_gpus=False)
    assert plan.config == TINY and plan.ranks_per_node == CPU_RANKS_PER_NODE and plan.gpus_per_node == 0
    assert "tiny CPU model" in plan.note
    own = plan_training(TrainConfig(d_model=32, n_heads=2), gpus_per_node=4, real_gpus=False)
    assert own.config.d_model == 32 and own.note == ""
    gpu = plan_training(TrainConfig(), gpus_per_node=8, real_gpus=True)
    assert gpu.config == TrainConfig() and gpu.ranks_per_node == 8 and not gpu.note


def test_summary_means_ranks_and_computes_mfu():
    s = summarise([_stats(0, [10.8, 9.0, 7.0]), _stats(1, [10.8, 9.2, 7.2])], TrainConfig())
    assert s.problems == ()
    assert s.losses == pytest.approx((10.8, 9.1, 7.1))
    assert s.tokens_per_s_per_gpu == pytest.approx(8192 * 3 / 0.32)
    assert s.peak_memory_gib == 2.0
    assert s.mfu_percent == pytest.approx(100 * (8192 * 3 / 0.32) * (6 * 940_640_256 + 12 * 16 * 2048 * 2048) / 989e12)


def test_summary_names_rank_and_gpu_of_a_nan_and_a_diverged_replica():
    s = summarise(
        [
            _stats(0, [10.8, 9.0, 7.0], mismatches=[(1, 3, "blocks.0.qkv.weight")]),
            _stats(1, [10.8, math.nan, 7.0], node="n2"),
        ],
        TrainConfig(),
    )
    nan, diverged = s.problems
    assert (nan.text, nan.ranks, nan.step) == ("rank 1 (n2:gpu1): loss is nan at step 1", (("n2", "gpu1"),), 1)
    assert diverged.text.startswith("rank 1 (n2:gpu1): 3 parameter tensor(s) differ from rank 0 (n1:gpu0)")
    assert diverged.ranks == (("n2", "gpu1"), ("n1", "gpu0"))
    # as findings: the rank that went wrong first is its GPU's; the replicas of two nodes are theirs together
    found = training_checks.correctness_findings(s)
    assert [(f.scope, f.nodes, f.culprits, f.gpu) for f in found] == [
        ("gpu", ("n2",), ("n2",), 1),
        ("nodes", ("n2", "n1"), (), None),
    ]


def test_a_loss_spread_by_the_all_reduce_convicts_the_rank_that_went_wrong_first():
    runs = [
        _stats(0, [10.8, 9.0, math.nan]),
        _stats(1, [10.8, math.nan, math.nan], node="n2"),
        _stats(2, [10.8, 9.0, math.nan], node="n3"),
    ]
    runs = [replace(r, world_size=3) for r in runs]
    found = training_checks.correctness_findings(summarise(runs, TrainConfig()))
    assert [(f.text, f.scope, f.nodes, f.culprits, f.gpu) for f in found] == [
        ("rank 0 (n1:gpu0): loss is nan at step 2", "nodes", ("n1", "n2", "n3"), ("n2",), None),
        ("rank 1 (n2:gpu1): loss is nan at step 1", "gpu", ("n2",), ("n2",), 1),
        ("rank 2 (n3:gpu2): loss is nan at step 2", "nodes", ("n1", "n2", "n3"), ("n2",), None),
    ]
    # every rank wrong at one step: none is told apart, the nodes are named together
    same = [_stats(r, [10.8, math.nan], node=f"n{r}") for r in range(2)]
    found = training_checks.correctness_findings(summarise(same, TrainConfig()), prefix="x: ")
    assert [(f.text, f.scope, f.culprits) for f in found] == [
        ("x: rank 0 (n0:gpu0): loss is nan at step 1", "nodes", ()),
        ("x: rank 1 (n1:gpu1): loss is nan at step 1", "nodes", ()),
    ]
    # on one node, whatever went wrong is that node's
    one = [_stats(r, [10.8, math.nan]) for r in range(2)]
    assert {(f.scope, f.culprits) for f in training_checks.correctness_findings(summarise(one, TrainConfig()))} == {
        ("node", ("n1",))
    }


def test_flat_loss_is_a_problem():
    s = summarise([_stats(0, [10.4, 10.4, 10.39, 10.4])], TrainConfig())
    (flat,) = s.problems
    assert "loss did not fall" in flat.text and flat.ranks == ()
    (found,) = training_checks.correctness_findings(s)
    assert (found.scope, found.culprits) == ("node", ("n1",))  # the run's one node


def test_unknown_gpu_has_no_mfu():
    assert summarise([_stats(0, [10.8, 7.0], name="Tesla V100-SXM2-32GB")], TrainConfig()).mfu_percent is None


def test_loss_agreement_and_percentile():
    a = summarise([_stats(0, [10.8, 8.0, 7.0, 6.9])], TrainConfig())
    b = summarise([_stats(0, [10.8, 8.0, 7.0, 6.9005])], TrainConfig())
    rel, tol = loss_agreement(a, b)
    assert rel < tol == 1e-2
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.5
    assert percentile([5.0], 95) == 5.0
    assert math.isnan(percentile([], 50))


@pytest.mark.parametrize("mode", ["single", "ddp", "fsdp"])
def test_gradient_accumulation_counts_every_micro_batch(mode):
    cfg = replace(TINY, grad_accum=2, steps=4, warmup_steps=1)
    (run,) = train(local_context(), config=cfg, modes=(mode,))
    assert run.tokens_per_step == 2 * TINY.micro_batch * TINY.seq_len
    assert len(run.losses) == cfg.warmup_steps + cfg.steps and len(run.step_times_s) == cfg.steps
    summary = summarise([run], cfg)
    assert summary.problems == ()
    assert summary.losses[-1] < summary.losses[0]


@pytest.mark.parametrize(("gpus", "ranks"), [(0, CPU_RANKS_PER_NODE), (1, 1), (2, 2), (8, CPU_RANKS_PER_NODE)])
def test_gres_only_training_has_at_most_one_cpu_rank_per_gpu(gpus, ranks):
    plan = plan_training(TrainConfig(), gpus_per_node=gpus, real_gpus=False)
    assert plan.ranks_per_node == ranks and plan.gpus_per_node == 0
    assert f"{ranks} CPU rank{'s' * (ranks != 1)} per node" in plan.note


def test_one_real_gpu_trains_on_one_rank():
    plan = plan_training(TrainConfig(), gpus_per_node=1, real_gpus=True)
    assert (plan.ranks_per_node, plan.gpus_per_node) == (1, 1)


def test_a_cpu_rank_takes_its_share_of_the_cpus_slurm_allotted_on_its_node():
    assert cpu_threads(4, {"SLURM_CPUS_ON_NODE": "16"}, usable=64) == 4
    assert cpu_threads(8, {"SLURM_CPUS_ON_NODE": "2"}, usable=64) == 1  # never fewer than one
    assert cpu_threads(1, {}, usable=64) == 64  # outside Slurm: the CPUs it may run on
    assert cpu_threads(1, {}) == len(os.sched_getaffinity(0))


def test_a_node_advertising_more_cpus_than_its_host_has_gets_the_hosts_share():
    # The test cluster's fake nodes advertise 8 CPUs on a 2-core machine: 4 threads in each of
    # 2 ranks made a step of the tiny model take 600-800 ms instead of about 20 ms.
    assert cpu_threads(2, {"SLURM_CPUS_ON_NODE": "8"}, usable=2) == 1
    assert cpu_threads(2, {"SLURM_CPUS_ON_NODE": "8"}, usable=16) == 4


def test_a_parameter_count_is_written_as_people_write_it():
    counts = (950, 207_360, 125_000_000, 940_640_256, 1_300_000_000)
    said = [training_checks.count_words(n) for n in counts]
    assert said == ["950", "207 k", "125 M", "941 M", "1.3 B"]


def test_the_detail_names_the_nodes_and_gpus_a_run_trained_on():
    def run(places):
        stats = [replace(_stats(r, [3.0, 2.0, 1.0], node=n), world_size=len(places)) for r, n in enumerate(places)]
        return summarise(stats, TrainConfig())

    assert training_checks.detail(run(["n1", "n1"]), tiny=False) == "2 × NVIDIA H200, bf16"
    across = run(["n1", "n1", "n2", "n2"])
    assert training_checks.detail(across, tiny=False) == "2 nodes × 2 × NVIDIA H200, bf16"
    alone = training_checks.Baseline(run(["n1"]), "7", "n1, alone")
    (tokens, _) = training_checks.speed(across, alone, "8", tiny=False)
    assert tokens.detail == "2 nodes × 2 × NVIDIA H200, bf16" and tokens.nodes == ("n1", "n2")
    assert training_checks.detail(run(["n1", "n1", "n2"]), tiny=False) == "3 × NVIDIA H200 on 2 nodes, bf16"

"""Training stability judged on recorded step times: per node, the spread of the steps (CV) and
the slowest step over the median, each against the set in force; a stall names node and step."""

from __future__ import annotations

import json
import math
from pathlib import Path

from pytest_gpucluster.checks import stability
from pytest_gpucluster.config import load
from pytest_gpucluster.config.profile import Profile
from pytest_gpucluster.verdict import judge
from pytest_gpucluster.workloads.training import TINY, RunStats, stability_config, summarise

REPO = Path(__file__).resolve().parents[2]
RECORDED = json.loads((REPO / "tests/data/stability/tiny_cpu_120_steps.json").read_text())


def _run(rank, times, *, node="n1", losses=(2.0, 1.0)) -> RunStats:
    return RunStats(
        mode="ddp",
        rank=rank,
        world_size=2,
        node=node,
        gpu=f"gpu{rank}",
        device_name="cpu",
        dtype="fp32",
        compiled=False,
        n_params=1,
        tokens_per_step=1,
        step_times_s=tuple(times),
        elapsed_s=sum(times),
        losses=tuple(losses),
        peak_memory_bytes=0,
    )


def _sets():
    config = load(REPO / "thresholds.toml")
    cpu = config.thresholds_for(Profile(name="x", gpu_model="cpu"))
    gpu = config.thresholds_for(Profile(name="y", gpu_model="NVIDIA H100 80GB HBM3"))
    return cpu, gpu


def test_recorded_cpu_run_is_steady_enough_for_the_cpu_set():
    times = tuple(RECORDED["step_times_s"])
    got = stability.stability("vm", times)
    assert got.steps == 120 and got.median_s > 0 and 0 < got.cv_percent < 150 and 1 <= got.slowest_ratio < 100
    cpu, _ = _sets()
    assert {judge(m, cpu[m.metric]).status for m in got.measurements()} <= {"pass", "warn"}
    # and its loss, recorded with the times, fell and stayed finite
    losses = RECORDED["losses"]
    assert all(math.isfinite(v) for v in losses) and losses[-1] < 0.5 * losses[0]


def test_a_node_step_is_its_slowest_rank():
    runs = [_run(0, [0.010, 0.011, 0.030]), _run(1, [0.012, 0.010, 0.010]), _run(0, [0.02, 0.02], node="n2")]
    assert stability.node_step_times(runs) == {"n1": (0.012, 0.011, 0.030), "n2": (0.02, 0.02)}


def test_a_stall_fails_naming_the_node_and_the_step():
    times = [0.010] * 100
    times[57] = 0.080  # one step eight times the median
    got = stability.stability("gpu-07", times)
    _, gpu = _sets()
    verdicts = {
        m.metric: judge(
            m,
            gpu[m.metric],
        )
        for m in got.measurements("ddp on 8 rank(s)", "4711")
    }
    slowest = verdicts[stability.SLOWEST_METRIC]
    assert slowest.status == "fail" and got.slowest_ratio == 8.0
    assert slowest.sentence.startswith("gpu-07: train.stability.slowest_step_ratio (100 steps, median 10 ms; ddp on 8")
    assert "slowest is step 57" in slowest.sentence and "above the fail line 3 ratio" in slowest.sentence
    assert (slowest.measurement.nodes, slowest.measurement.gpu, slowest.measurement.job_id) == (
        ("gpu-07",),
        None,
        "4711",
    )
    assert verdicts[stability.CV_METRIC].status == "fail"  # 65 %: one step of 8 × the median spreads them too


def test_a_spread_of_steps_fails_the_cv():
    times = [0.010, 0.013] * 50  # alternating: CV 13 %
    got = stability.stability("gpu-02", times)
    _, gpu = _sets()
    assert round(got.cv_percent, 1) == 13.0 and judge(got.measurements()[0], gpu[stability.CV_METRIC]).status == "fail"


def test_times_that_are_not_times_are_named():
    found = stability.time_findings({"n1": (0.01, math.nan), "n2": (0.01,), "n3": (0.01, 0.02)})
    assert [(f.text, f.scope, f.culprits) for f in found] == [
        ("n1: step 1 took nan s, not a time", "node", ("n1",)),
        ("n2: 1 timed step(s); the spread needs at least 2", "node", ("n2",)),
    ]


def test_the_long_run_is_the_profile_sizes_run_longer():
    config = stability_config(TINY)
    assert config.steps == TINY.stability_steps == 120 and config.d_model == TINY.d_model
    nan = summarise([_run(0, [0.01, 0.01], losses=(2.0, math.nan))], config)
    assert [p.text for p in nan.problems] == ["rank 0 (n1:gpu0): loss is nan at step 1"]

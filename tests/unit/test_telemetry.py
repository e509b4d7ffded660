"""Telemetry: /proc parsing on recorded files, GPU selection, and the idle/throttle logic on a
constructed 2-node x 4-GPU series shaped like NVML's at 0.5 s (tests/data/telemetry_series_*):
node2:gpu1 idles from 10 s to 25 s while the others work; node1:gpu2 hits HW thermal slowdown."""

from __future__ import annotations

import json
import time
from dataclasses import replace
from pathlib import Path

import pytest

from pytest_gpucluster.checks import telemetry as tm_checks
from pytest_gpucluster.workloads import telemetry as tm

DATA = Path(__file__).parent.parent / "data"


def _recorded() -> list[tm.NodeTelemetry]:
    out = []
    for n in json.loads((DATA / "telemetry_series_2x4_one_idle.json").read_text()):
        gpus = {g: {m: [tuple(p) for p in pts] for m, pts in s.items()} for g, s in n["gpus"].items()}
        out.append(
            tm.NodeTelemetry(
                node=n["node"],
                interval_s=n["interval_s"],
                t0=n["t0"],
                gpus=gpus,
                node_series={},
                samples=61,
                busy_s=0.1,
                wall_s=30.0,
            )
        )
    return out


def test_cpu_and_memory_from_recorded_proc():
    proc = DATA / "telemetry_proc"
    before = tm.read_cpu_times(proc)
    after = [int(x) for x in (proc / "stat.later").read_text().split()[1:]]
    # 187 busy jiffies out of 837 between the two recordings.
    assert tm.cpu_busy_percent(before, after) == pytest.approx(22.3, abs=0.1)
    assert tm.cpu_busy_percent(before, before) == 0.0
    assert 0.0 < tm.read_mem_used_percent(proc) < 100.0


@pytest.mark.parametrize(
    ("uuids", "visible", "picked"),
    [
        (["GPU-a", "GPU-b", "GPU-c", "GPU-d"], None, [0, 1, 2, 3]),  # no restriction: every GPU
        (["GPU-a", "GPU-b", "GPU-c", "GPU-d"], "2,3", [2, 3]),  # Slurm without device cgroups
        (["GPU-c", "GPU-d"], "0,1", [0, 1]),  # device cgroups: NVML sees only the job's GPUs
        (["GPU-a", "GPU-b", "GPU-c", "GPU-d"], "GPU-c", [2]),  # by UUID
        (["GPU-a", "GPU-b"], "", []),  # submitit's local executor with 0 GPUs hides them all
    ],
)
def test_select_gpus(uuids, visible, picked):
    assert tm.select_gpus(uuids, visible) == picked


def test_gpu_idle_while_peers_work_is_found():
    fractions = tm_checks.idle_fractions(tm_checks.absolute_util(_recorded()))
    odd = fractions[("node2", 1)]
    assert odd.percent == pytest.approx(56.6, abs=0.1)  # idle 10 s..25 s of the 2 s..28 s load
    assert odd.detail == "idle in 30 of 53 samples while its peers were busy"
    others = {w: f.percent for w, f in fractions.items() if w != ("node2", 1)}
    assert set(others.values()) == {0.0}
    m = odd.measurement("training", "77")
    assert (m.metric, m.nodes, m.gpu, m.where, m.job_id) == (
        "telemetry.gpu_idle_fraction",
        ("node2",),
        1,
        "node2:gpu1",
        "77",
    )
    assert m.detail == "training; idle in 30 of 53 samples while its peers were busy"


def test_peers_that_never_work_do_not_count_as_idle():
    flat = {("n", 0): [(float(t), 0.0) for t in range(10)], ("n", 1): [(float(t), 0.0) for t in range(10)]}
    assert {w: (f.percent, f.peer_busy_samples) for w, f in tm_checks.idle_fractions(flat).items()} == {
        ("n", 0): (0.0, 0),
        ("n", 1): (0.0, 0),
    }


def test_throttle_findings_ignore_power_cap_and_idle():
    (found,) = tm_checks.throttle_findings(_recorded())
    assert found.text == "node1:gpu2: HW thermal slowdown in 6 of 61 samples (~3 s)"
    assert (found.scope, found.nodes, found.gpu, found.culprits) == ("gpu", ("node1",), 2, ("node1",))


def test_series_records_share_one_time_axis():
    records = tm_checks.series_records(_recorded())
    util = {r["where"]: r for r in records if r["name"] == "telemetry.gpu_util"}
    assert sorted(util) == [f"node{n}:gpu{g}" for n in (1, 2) for g in range(4)]
    assert util["node1:gpu0"]["points"][0] == [0.0, 0.0]
    assert util["node2:gpu0"]["points"][0][0] == pytest.approx(0.2)  # node2 started 0.2 s later
    assert util["node1:gpu0"]["y_label"] == "%"
    long = tm_checks._thin([(float(t), 1.0) for t in range(5000)])
    assert len(long) <= tm_checks.MAX_POINTS
    # Each watched workload names its own series (the training job's beside the collectives').
    training = {r["name"] for r in tm_checks.series_records(_recorded(), prefix="telemetry.training")}
    assert "telemetry.training.gpu_util" in training
    assert not any(name.startswith("telemetry.gpu_") for name in training)


def test_sampler_runs_in_a_side_thread_on_this_machine():
    with tm.Sampler("here", interval_s=0.05) as sampler:
        time.sleep(0.4)
    result = sampler.result()
    assert result.samples >= 5
    assert len(result.node_series["cpu_util"]) >= 4
    assert result.gpus == {}  # no NVIDIA driver here: node series only, and it says why
    assert any("NVML unavailable" in e for e in result.errors)
    assert 0.0 < result.busy_fraction < 0.5


def test_under_telemetry_wraps_any_workload():
    from pytest_gpucluster.workloads.context import local_context

    out = tm.under_telemetry(local_context(), fn=_double, interval_s=0.05, x=21)
    assert out.value == 42
    assert out.telemetry is not None
    assert out.telemetry.samples >= 1


def _double(ctx, *, x):
    return 2 * x


def _empty(gpus=None, **kw) -> tm.NodeTelemetry:
    return tm.NodeTelemetry(
        node="node2", interval_s=0.5, t0=0.0, gpus=gpus or {}, node_series={}, samples=10, busy_s=0.1, wall_s=5.0, **kw
    )


def test_empty_gpu_series_name_the_node_and_the_samplers_error():
    assert tm_checks.empty_gpu_series_findings(_recorded()) == []
    failed = _empty(
        gpu_error="NVML unavailable: NVMLError_DriverNotLoaded: Driver Not Loaded",
        errors=("NVML unavailable: NVMLError_DriverNotLoaded: Driver Not Loaded; GPU series not sampled",),
    )
    (found,) = tm_checks.empty_gpu_series_findings([failed])
    assert found.text == (
        "node2: the telemetry sampler read no GPU (NVML unavailable: NVMLError_DriverNotLoaded: Driver Not Loaded)"
    )
    assert (found.scope, found.culprits) == ("node", ("node2",))
    unsampled = _empty({"gpu0": {m: [] for m in tm.GPU_METRICS}}, errors=("node2:gpu0: util not available (X)",))
    assert [f.text for f in tm_checks.empty_gpu_series_findings([unsampled])] == [
        "node2: the telemetry sampler read no sample of its 1 GPU(s) (node2:gpu0: util not available (X))"
    ]
    # On empty series the idle and throttle analyses find nothing: the check must not pass on that.
    assert tm_checks.idle_fractions(tm_checks.absolute_util([failed])) == {}
    assert tm_checks.throttle_findings([failed]) == []
    # the node's own series: fewer than 2 samples means the sampler did not run
    (found,) = tm_checks.sampling_findings(replace(failed, node_series={"cpu_util": [(0.0, 3.0)]}))
    assert (found.text, found.scope) == ("node2: 1 cpu_util samples in 5.0 s at 0.5 s intervals", "node")


class _BrokenNvml:
    class NVMLError(Exception):
        pass

    @staticmethod
    def nvmlInit():
        raise _BrokenNvml.NVMLError("Driver Not Loaded")


class _NvmlWithoutDevices(_BrokenNvml):
    nvmlDeviceGetCurrentClocksEventReasons = None

    @staticmethod
    def nvmlInit():
        pass

    @staticmethod
    def nvmlDeviceGetCurrentClocksThrottleReasons(handle):
        return 0

    @staticmethod
    def nvmlDeviceGetCount():
        raise _BrokenNvml.NVMLError("GPU is lost")


@pytest.mark.parametrize(
    ("nvml", "error"),
    [
        (_BrokenNvml, "NVML unavailable: NVMLError: Driver Not Loaded"),
        (_NvmlWithoutDevices, "NVML could not list the GPUs: NVMLError: GPU is lost"),
    ],
)
def test_the_sampler_carries_nvmls_error_back(monkeypatch, nvml, error):
    monkeypatch.setitem(__import__("sys").modules, "pynvml", nvml)
    with tm.Sampler("node2", interval_s=0.05, proc_root=DATA / "telemetry_proc") as sampler:
        time.sleep(0.12)
    result = sampler.result()
    assert result.gpu_error == error and result.gpus == {}
    assert [f.text for f in tm_checks.empty_gpu_series_findings([result])] == [
        f"node2: the telemetry sampler read no GPU ({error})"
    ]
    assert result.node_series["mem_used_pct"]  # the node itself is still sampled


def test_a_gpu_whose_peers_never_worked_is_not_judged_idle_free():
    from pytest_gpucluster.checks.telemetry import IdleFraction, unjudged_idle

    fractions = {
        ("node1", 0): IdleFraction(("node1", 0), 0.0, 0, 0),
        ("node1", 1): IdleFraction(("node1", 1), 0.0, 0, 12),
    }
    (found,) = unjudged_idle(fractions)
    assert found.text == "node1:gpu0: no sample came while its peers were busy: its idleness cannot be judged"
    assert (found.scope, found.gpu, found.severity) == ("gpu", 0, "fail")  # not measured: never a pass

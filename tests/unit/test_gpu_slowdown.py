"""The time each GPU ran slowed over the run, from the clock-event counters of the fabric check's
two snapshots: the shares judged by the shipped lines on the H200's captured counters, and on the
same pair with a slowdown, a renumbered field, a reset and a missing snapshot put in."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from pytest_gpucluster.checks import gpu_slowdown
from pytest_gpucluster.config import ThresholdSet, load
from pytest_gpucluster.workloads.fabric_counters import FabricSnapshot, snapshot_from_dict

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "tests" / "data" / "fabric"


@pytest.fixture(scope="module")
def h200() -> ThresholdSet:
    config = load(REPO / "thresholds.toml")
    return config.thresholds_for(config.profiles["local"], "NVIDIA H200")


def _snapshot(name: str) -> FabricSnapshot:
    return snapshot_from_dict(json.loads((DATA / f"clock_events_h200_{name}.json").read_text()))


def _pair() -> tuple[FabricSnapshot, FabricSnapshot]:
    return _snapshot("before"), _snapshot("after")


def _after(after: FabricSnapshot, **slowed_ns: int) -> FabricSnapshot:
    gpu = after.gpus[0]
    return dataclasses.replace(after, gpus=(dataclasses.replace(gpu, slowed_ns={**gpu.slowed_ns, **slowed_ns}),))


def test_the_captured_h200_run_spent_no_time_slowed_and_its_power_cap_share_is_said(h200):
    before, after = _pair()
    assert gpu_slowdown.nothing_to_read(before) is None
    found = gpu_slowdown.judge_node("vm", before, after, h200, job_id="1100")
    assert [(v.measurement.metric, v.measurement.value, v.status) for v in found.verdicts] == [
        ("gpu.hw_slowdown_share", 0.0, "pass"),
        ("gpu.sw_thermal_share", 0.0, "pass"),
    ]
    assert found.findings == () and found.unjudged == ()
    detail = found.verdicts[0].measurement.detail
    # 214.68 s of 353 s at the power cap: the run's GEMMs and training at 700 W.
    assert detail == (
        "over 5 min 53 s: HW thermal slowdown 0 s, HW power brake 0 s, SW thermal slowdown 0 s, "
        "at the power cap 60.8 % of it (normal at full load)"
    )
    assert found.verdicts[0].measurement.where == "vm:gpu0"


def test_hw_slowdown_warns_at_once_and_fails_past_one_percent_naming_the_gpu(h200):
    before, after = _pair()
    brief = gpu_slowdown.judge_node("vm", before, _after(after, hw_power_brake=1_000_000_000), h200)
    (f,) = brief.findings
    assert (f.severity, f.nodes, f.gpu) == ("warn", ("vm",), 0) and "gpu.hw_slowdown_share" in f.text
    long = gpu_slowdown.judge_node("vm", before, _after(after, hw_thermal=6_000_000_000, hw_power_brake=1), h200)
    (f,) = long.findings
    assert (f.severity, f.convicts) == ("fail", ("vm",)) and f.text.startswith("vm:gpu0: gpu.hw_slowdown_share")
    assert "HW thermal slowdown 6 s" in long.verdicts[0].measurement.detail


def test_sw_thermal_slowdown_is_judged_by_its_own_line(h200):
    before, after = _pair()
    found = gpu_slowdown.judge_node("vm", before, _after(after, sw_thermal=30_000_000_000), h200)
    assert [(v.measurement.metric, v.status) for v in found.verdicts] == [
        ("gpu.hw_slowdown_share", "pass"),
        ("gpu.sw_thermal_share", "fail"),
    ]
    assert found.verdicts[1].measurement.value == pytest.approx(100 * 30 / 353)


def test_counters_that_cannot_be_this_time_leave_the_gpu_not_judged(h200):
    before, after = _pair()
    # A driver numbering the field otherwise answers with another quantity: more than the span.
    renumbered = gpu_slowdown.judge_node("vm", before, _after(after, hw_thermal=10**15, sw_thermal=10**15), h200)
    reset = gpu_slowdown.judge_node("vm", _after(before, hw_thermal=5, sw_thermal=5), after, h200)
    for found in (renumbered, reset):
        assert [(f.severity, f.gpu, f.text.split(":")[2]) for f in found.findings] == [
            ("not_judged", 0, " gpu.hw_slowdown_share not judged"),
            ("not_judged", 0, " gpu.sw_thermal_share not judged"),
        ]
        assert "not comparable across the run" in found.findings[0].text and found.verdicts == ()
    # One GPU without the counters beside one with them: that GPU is not judged, never passed.
    before2 = dataclasses.replace(
        before, gpus=(*before.gpus, dataclasses.replace(before.gpus[0], index=1, slowed_ns={}))
    )
    after2 = dataclasses.replace(after, gpus=(*after.gpus, dataclasses.replace(after.gpus[0], index=1, slowed_ns={})))
    (f,) = gpu_slowdown.judge_node("vm", before2, after2, h200).findings
    assert f.text == "vm:gpu1: time slowed not judged: NVML keeps no clock-event counters on it"
    lost = gpu_slowdown.judge_node("vm", before, None, h200)
    assert lost.findings[0].severity == "not_judged" and "after the run" in lost.findings[0].text


def test_nothing_to_read_says_why():
    before, _ = _pair()
    bare = dataclasses.replace(before, gpus=(dataclasses.replace(before.gpus[0], slowed_ns={}),))
    assert "keeps no clock-event time counters" in gpu_slowdown.nothing_to_read(bare)
    assert gpu_slowdown.nothing_to_read(dataclasses.replace(before, gpus=())) == "NVML sees no GPU"
    off = dataclasses.replace(before, nvml_status="unsupported: not asked for (the profile has no real GPUs)")
    assert gpu_slowdown.nothing_to_read(off) == "NVML not read (not asked for (the profile has no real GPUs))"


def test_a_set_without_the_lines_keeps_the_shares_and_asks_for_them():
    before, after = _pair()
    found = gpu_slowdown.judge_node("vm", before, after, ThresholdSet("site", {}))
    assert [m.metric for m in found.unjudged] == ["gpu.hw_slowdown_share", "gpu.sw_thermal_share"]
    assert [f.metric for f in found.findings] == ["gpu.hw_slowdown_share", "gpu.sw_thermal_share"]
    assert all(f.severity == "warn" and f.scope == "config" for f in found.findings)

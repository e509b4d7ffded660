"""The soak's rules (checks/soak.py) on cycle series: a slow drift, a one-cycle dip that must not
fail, a step drop, a GPU behind its node's best, throttling under and over the window's rate,
memory errors, Xids, fabric counters, SDC digests, temperatures; each finding names the GPU, the
cause and the cycle it began in."""

from __future__ import annotations

from typing import Any

import pytest

from pytest_gpucluster.checks import soak as checks
from pytest_gpucluster.checks.soak import Lines, SoakTrack
from pytest_gpucluster.config.fabric_rules import DEFAULT_RULES
from pytest_gpucluster.config.soak import BehindNodeBest, Drift, MemoryErrors, SoakRules, ThrottleRate

T0 = 1_800_000_000.0
CYCLE = 60.0
DRIFT = Drift(warn=0.05, fail=0.10, early_cycles=3, cycles=3, metrics=("tflops",))
BEST = BehindNodeBest(tolerance=0.10, cycles=3)
HW = ThrottleRate(reasons=("hw_slowdown",), fail_per_min=0.6, window_min=10, warn_per_min=0.1)
RULES = SoakRules(behind_node_best=BEST, drift=DRIFT, hw_slowdown=HW, memory_errors=MemoryErrors())
LINES = Lines(temperature=(85.0, 75.0, "the set's gpu.temperature"), fabric=DEFAULT_RULES)


def stream(node: str, gpu: str, tflops: list[float], **per_cycle: Any) -> list[dict[str, Any]]:
    """A GPU's records: its start, then one cycle a minute; ``per_cycle`` maps a cycle index to
    extra fields of that cycle (``{5: {"ecc_unc": 1}}``) or gives a field for every cycle."""
    records: list[dict[str, Any]] = [
        {"kind": "start", "node": node, "gpu": gpu, "t": T0, "device": "NVIDIA H100", "ecc_unc": 0}
    ]
    extra = per_cycle.pop("extra", {})
    for i, value in enumerate(tflops):
        cycle = {
            "kind": "cycle",
            "node": node,
            "gpu": gpu,
            "cycle": i,
            "t0": T0 + i * CYCLE,
            "t1": T0 + (i + 1) * CYCLE,
        }
        cycle.update({"tflops": value, "temp_c": 60, "samples": 60, **per_cycle})
        cycle.update(extra.get(i, {}))
        records.append(cycle)
    return records


def judged(*streams: list[dict[str, Any]], rules: SoakRules = RULES, lines: Lines = LINES) -> list:
    track = SoakTrack()
    for s in streams:
        track.add(s)
    return checks.judge(track, rules, lines)


def texts(findings) -> list[tuple[str, str]]:
    return [(f.severity, f.text) for f in findings]


STEADY = [700.0] * 12


def test_a_steady_gpu_has_no_finding():
    assert judged(stream("n1", "gpu0", STEADY), stream("n1", "gpu1", STEADY)) == []


def test_a_one_cycle_dip_does_not_fail():
    dip = [*STEADY[:6], 350.0, *STEADY[7:]]
    assert judged(stream("n1", "gpu0", dip), stream("n1", "gpu1", STEADY)) == []


def test_a_step_drop_fails_from_the_cycle_it_began():
    step = [*STEADY[:5], *[600.0] * 7]
    (found,) = judged(stream("n1", "gpu0", step))
    assert (found.severity, found.nodes, found.gpu, found.cycle) == ("fail", ("n1",), 0, 5)
    assert found.text == (
        "n1:gpu0 GEMM 600 TFLOP/s is 14.3 % below its own start (700, cycles 1-3) in 3 cycles in a row "
        "from cycle 5 (0 h 5 min)"
    )
    assert found.metric == "soak.tflops.drift" and found.value == pytest.approx(600 / 700, abs=1e-4)


def test_a_slow_drift_warns_then_fails_once_it_is_past_the_fail_line():
    # 1 % a cycle: past 5 % at cycle 6, past 10 % at cycle 11.
    slow = [700.0 * (1 - 0.01 * max(0, i - 1)) for i in range(16)]
    (found,) = judged(stream("n1", "gpu0", slow))
    assert found.severity == "fail" and found.cycle == 12, found.text
    early = judged(stream("n1", "gpu0", slow[:11]))
    assert [(f.severity, f.cycle) for f in early] == [("warn", 7)]


def test_drift_waits_for_the_early_cycles():
    assert judged(stream("n1", "gpu0", [700.0, 300.0, 300.0])) == []  # no start of its own yet


def test_a_gpu_behind_its_nodes_best_fails_naming_the_best():
    behind = [*STEADY[:4], *[610.0] * 8]
    findings = judged(stream("n7", "gpu0", STEADY), stream("n7", "gpu3", behind))
    best = [f for f in findings if f.metric == "soak.tflops.vs_node_best"]
    assert len(best) == 1 and best[0].gpu == 3 and best[0].cycle == 4
    assert best[0].text.startswith("n7:gpu3 GEMM 610 TFLOP/s is 12.9 % below its node's best GPU (gpu0, 700)")
    # the same GPU also fell below its own start: a second cause, said in its own sentence
    assert {f.metric for f in findings} == {"soak.tflops.vs_node_best", "soak.tflops.drift"}


def test_a_node_slowed_as_a_whole_is_not_behind_its_best():
    slow = [*STEADY[:4], *[640.0] * 8]
    findings = judged(stream("n1", "gpu0", slow), stream("n1", "gpu1", slow))
    assert {f.metric for f in findings} == {"soak.tflops.drift"} and {f.gpu for f in findings} == {0, 1}


def throttled(seconds_by_cycle: dict[int, float], cycles: int = 20) -> list[dict[str, Any]]:
    extra = {c: {"throttle": {"hw_slowdown": [1, s]}} for c, s in seconds_by_cycle.items()}
    return stream("n1", "gpu0", [700.0] * cycles, extra=extra)


def test_throttling_under_the_windows_rate_passes_and_over_it_fails():
    # 5 readings in 10 min is 0.5/min, under 0.6 (it warns at 0.1)
    under = judged(throttled({12: 5.0}))
    assert [(f.severity, f.metric) for f in under] == [("warn", "soak.throttle")]
    # 8 readings in the last 10 minutes: 0.8/min
    (over,) = judged(throttled({12: 4.0, 14: 4.0}))
    assert over.severity == "fail" and over.cycle == 12
    assert over.text.startswith("n1:gpu0 HW slowdown 0.8/min over 10 min from cycle 12 (0 h 12 min)")


def test_bursts_far_apart_stay_under_the_rate_of_each_window():
    (found,) = judged(throttled({2: 5.0, 18: 5.0}, cycles=20))
    assert found.severity == "warn"


def test_a_burst_early_on_weighs_what_it_weighs_later():
    early, late = judged(throttled({1: 5.0}, cycles=3)), judged(throttled({15: 5.0}))
    assert [f.severity for f in early] == [f.severity for f in late] == ["warn"]  # 5 in a 10-min window


def test_a_gpu_throttled_all_the_time_fails_a_short_soak():
    (found,) = judged(throttled({0: 60.0, 1: 60.0}, cycles=2))
    assert found.severity == "fail" and found.cycle == 0 and "6.0/min over 10 min from cycle 0" in found.text


def test_memory_errors_fail_from_the_cycle_that_shows_them():
    extra = {4: {"ecc_unc": 2}, 6: {"remap_pending": 1}}
    findings = judged(stream("n1", "gpu2", STEADY, extra=extra, ecc_unc=0))
    assert texts(findings) == [
        ("fail", "n1:gpu2 2 new uncorrectable ECC error(s) in cycle 4 (0 h 4 min)"),
        ("fail", "n1:gpu2 a row remap pending (reset the GPU) in cycle 6 (0 h 6 min)"),
    ]


def test_an_error_count_from_before_the_soak_is_not_new():
    records = stream("n1", "gpu0", STEADY, ecc_unc=3)
    records[0]["ecc_unc"] = 3
    assert judged(records) == []


def test_a_reset_class_xid_fails_its_gpu_and_another_warns():
    extra = {3: {"xids": [{"xid": 79, "t": T0 + 200, "gpu": 1}, {"xid": 13, "t": T0 + 201, "gpu": 0}]}}
    findings = judged(stream("n1", "gpu0", STEADY, extra=extra), stream("n1", "gpu1", STEADY))
    assert [(f.severity, f.gpu, f.cycle) for f in findings] == [("fail", 1, 3), ("warn", 0, 3)]
    assert findings[0].text.startswith("n1:gpu1 Xid 79 (")


def test_fabric_counters_are_judged_by_their_familys_rate_per_cycle():
    start = stream("n1", "gpu0", STEADY[:4])
    start[0]["fabric"] = {"ib": {"mlx5_0/1": {"link_downed": 0, "symbol_error": 0}}}
    for i, c in enumerate(start[1:]):
        c["fabric"] = {"ib": {"mlx5_0/1": {"link_downed": 1 if i >= 2 else 0, "symbol_error": 3 * i}}}
    findings = judged(start)
    assert [(f.severity, f.port, f.cycle) for f in findings] == [("warn", "mlx5_0/1", 1), ("fail", "mlx5_0/1", 2)]
    assert (
        findings[1].text.startswith("n1 mlx5_0/1 InfiniBand link_downed +1 (")
        and "cycle 2 (0 h 2 min)" in findings[1].text
    )


def test_a_gpus_pcie_replays_in_a_cycle_are_judged_against_eight_a_minute_and_a_later_fail_wins():
    start = stream("n1", "gpu0", STEADY[:4])
    start[0]["fabric"] = {"pcie": {"link": {"pcie_replay": 100}}}
    for i, c in enumerate(start[1:]):
        c["fabric"] = {"pcie": {"link": {"pcie_replay": (100, 101, 160, 160)[i]}}}
    findings = judged(start)
    # +1 in cycle 1 warns, +59 in cycle 2 fails: the GPU's one finding is the failure.
    assert [(f.severity, f.gpu, f.port, f.cycle) for f in findings] == [("fail", 0, "", 2)]
    assert (
        findings[0].text.startswith("n1:gpu0 PCIe replay +59 (") and "line warn > 0, fail ≥ 8/min" in findings[0].text
    )
    warned = stream("n1", "gpu0", STEADY[:4])
    warned[0]["fabric"] = {"pcie": {"link": {"pcie_replay": 0}}}
    for i, c in enumerate(warned[1:]):
        c["fabric"] = {"pcie": {"link": {"pcie_replay": (0, 1, 1, 2)[i]}}}
    assert [(f.severity, f.cycle) for f in judged(warned)] == [("warn", 1)]


def test_an_sdc_digest_unlike_its_models_majority_fails_and_so_does_a_change_of_its_own():
    digest = {0: {"sdc": "aa"}, 5: {"sdc": "aa"}, 10: {"sdc": "aa"}}
    odd = {0: {"sdc": "aa"}, 5: {"sdc": "bb"}, 10: {"sdc": "aa"}}
    findings = judged(stream("n1", "gpu0", STEADY, extra=digest), stream("n2", "gpu0", STEADY, extra=odd))
    assert texts(findings) == [
        ("fail", "n2:gpu0 SDC chain result differs from its model's majority (NVIDIA H100) in cycle 5 (0 h 5 min)")
    ]
    alone = judged(stream("n1", "gpu0", STEADY, extra={0: {"sdc": "aa"}, 5: {"sdc": "cc"}, 10: {"sdc": "aa"}}))
    assert [f.cycle for f in alone] == [5]


def test_a_temperature_past_the_sets_line_is_said_with_its_cycle():
    hot = stream("n1", "gpu0", STEADY, extra={7: {"temp_c": 79}, 9: {"temp_c": 88}})
    findings = judged(hot)
    assert texts(findings) == [
        ("fail", "n1:gpu0 GPU temperature 88 C in cycle 9 (0 h 9 min), above 85 C (the set's gpu.temperature)")
    ]


def test_a_cycle_that_raised_fails_the_gpu_with_its_error():
    broken = stream(
        "n1", "gpu0", STEADY[:3], extra={2: {"error": "RuntimeError: CUDA error: unspecified launch failure"}}
    )
    (found,) = judged(broken)
    assert found.text == "n1:gpu0 cycle 2 (0 h 2 min) failed: RuntimeError: CUDA error: unspecified launch failure"


def test_the_all_reduce_drifts_for_the_node_not_for_each_gpu():
    rule = SoakRules(drift=Drift(warn=0.05, fail=0.1, early_cycles=3, cycles=3, metrics=("busbw_gbps",)))
    low = {i: {"busbw_gbps": 200.0} for i in range(5, 12)}
    streams = [stream("n1", g, STEADY, busbw_gbps=350.0, extra=low) for g in ("gpu0", "gpu1")]
    (found,) = judged(*streams, rules=rule)
    assert (found.scope, found.gpu, found.cycle) == ("node", None, 5)
    assert found.text.startswith("n1 all_reduce busbw 200 GB/s is 42.9 % below its own start")


def test_failing_nodes_are_those_a_failure_convicts():
    step = [*STEADY[:5], *[500.0] * 7]
    findings = judged(stream("n1", "gpu0", STEADY), stream("n2", "gpu0", step))
    assert checks.failing_nodes(findings) == ["n2"]


def test_progress_names_the_gpu_that_moved_most():
    track = SoakTrack()
    track.add(stream("n1", "gpu0", STEADY[:6]))
    track.add(stream("n7", "gpu3", [700, 700, 700, 700, 690, 671.3]))
    line = checks.progress(track, 8 * 3600, T0 + 6 * CYCLE)
    assert line == "soak 6 min of 8 h 0 min, cycle 6; n7:gpu3 -4.1 % TFLOP/s since cycle 1"


def test_the_section_keeps_each_gpus_series_and_how_each_node_ended():
    track = SoakTrack()
    track.add(stream("n1", "gpu0", [700.0, 702.0, 698.0, 699.0], extra={2: {"throttle": {"sw_power_cap": [1, 3.0]}}}))
    section = checks.section(
        track,
        requested_s=240.0,
        config={"cycle_s": 60},
        rules=RULES,
        nodes={"n1": {"job_id": "7", "ended": "duration"}},
    )
    node = section["nodes"]["n1"]
    assert (node["job_id"], node["ended"], node["cycles"], node["soaked_s"]) == ("7", "duration", 4, 240.0)
    gpu = node["gpus"]["gpu0"]
    assert gpu["t"] == [0.0, 60.0, 120.0, 180.0] and gpu["tflops"] == [700.0, 702.0, 698.0, 699.0]
    assert gpu["throttle"] == {"sw_power_cap": [[2, 1, 3.0]]}
    assert gpu["drift"] == {
        "metric": "tflops",
        "first": 699.0,
        "last": 699.0,
        "worst": 698.0,
        "worst_cycle": 2,
        "change_pct": 0.0,
    }
    assert section["rules"]["drift"]["fail"] == 0.1 and section["rules"]["thermal"] is None


def test_a_gpu_nvml_never_read_is_not_judged_for_what_nvml_tells():
    records = stream("n1", "gpu0", STEADY[:4], samples=0)
    records[2]["nvml_errors"] = ["NVMLError_Unknown: Unknown Error"]
    (found,) = judged(records)
    assert (found.severity, found.gpu) == ("not_judged", 0)
    assert found.text == (
        "n1:gpu0: NVML gave no reading in 4 cycles (NVMLError_Unknown: Unknown Error): its throttling, "
        "temperatures and memory errors are not judged"
    )
    watched = stream("n1", "gpu0", STEADY[:4], samples=30)
    cpu = stream("n1", "cpu0", STEADY[:4])
    cpu[0]["device"] = "cpu"
    assert judged(watched) == [] and judged(cpu) == []

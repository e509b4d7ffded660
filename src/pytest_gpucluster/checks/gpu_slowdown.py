"""The time each GPU ran with its clocks held down for heat or power over the whole run, judged on
the login node from NVML's cumulative clock-event counters in the fabric check's two snapshots
(``workloads.fabric_counters``: before the first workload and after every other job).

Sampling the clock-event reasons while a job runs (``checks.telemetry``) sees a slowdown only at
the instants it samples, and only in that job; the counters hold every nanosecond of the run.
Per GPU, the share of the span between the snapshots:

- ``gpu.hw_slowdown_share``: HW thermal slowdown and HW power brake together, the board's own
  protection (a GPU past its hardware temperature limit, or a power supply or chassis pulling
  the brake): a healthy, cooled GPU never asserts it.
- ``gpu.sw_thermal_share``: the driver holding clocks down because the GPU runs hot.
- The share at the software power cap is recorded beside them: a GPU at full load meets its
  power limit in normal work, so it is evidence, not a fault (the node configuration checks
  that limit itself).
"""

from __future__ import annotations

from pytest_gpucluster.checks import lines
from pytest_gpucluster.checks.fabric_text import span
from pytest_gpucluster.checks.storage import Judged
from pytest_gpucluster.config import ThresholdSet
from pytest_gpucluster.verdict import Finding, Measurement, judge
from pytest_gpucluster.workloads.fabric_counters import FabricSnapshot, GpuNvLinks

HW = "gpu.hw_slowdown_share"
SW_THERMAL = "gpu.sw_thermal_share"
GUIDE = "docs/inventory-telemetry.md says what the shares mean"
HW_REASONS = ("hw_thermal", "hw_power_brake")
# A counter may run a little ahead of the snapshots' own clock readings.
SLACK = 1.01
WORDS = {
    "hw_thermal": "HW thermal slowdown",
    "hw_power_brake": "HW power brake",
    "sw_thermal": "SW thermal slowdown",
    "sw_power_cap": "the power cap",
}


def nothing_to_read(before: FabricSnapshot) -> str | None:
    """Why ``before`` holds no clock-event counter to compare, or None."""
    if not before.nvml_status.startswith("ok"):
        return f"NVML not read ({before.nvml_status.removeprefix('unsupported: ')})"
    if not before.gpus:
        return "NVML sees no GPU"
    if not any(g.slowed_ns for g in before.gpus):
        return "NVML keeps no clock-event time counters on its GPUs (nvmlDeviceGetFieldValues)"
    return None


def _seconds(before: GpuNvLinks, after: GpuNvLinks, reason: str, length: float) -> float | None:
    """Seconds the GPU spent held down for ``reason`` between the snapshots, ``length`` seconds
    apart; None where either snapshot lacks it, the counter went back (the driver reloaded between
    them) or rose by more than the span holds (the driver numbers its fields otherwise than the
    binding: the value is not this time)."""
    if reason not in before.slowed_ns or reason not in after.slowed_ns:
        return None
    rise = (after.slowed_ns[reason] - before.slowed_ns[reason]) / 1e9
    return None if rise < 0 or rise > length * SLACK else rise


def _detail(times: dict[str, float | None], length: float) -> str:
    said = [f"{WORDS[r]} {t:.3g} s" for r, t in times.items() if t is not None and r != "sw_power_cap"]
    capped = times.get("sw_power_cap")
    if capped is not None:
        said.append(f"at {WORDS['sw_power_cap']} {100 * capped / length:.3g} % of it (normal at full load)")
    return f"over {span(length)}: " + ", ".join(said)


def judge_node(
    node: str,
    before: FabricSnapshot,
    after: FabricSnapshot | None,
    thresholds: ThresholdSet,
    job_id: str = "",
) -> Judged:
    """Each GPU of ``node`` that both snapshots read: its HW slowdown and SW thermal shares of the
    span judged against their lines (an unset line keeps the figure and warns to set it), the
    power-capped share said beside them. A GPU without the counters or missing after the run, or a
    share whose counters cannot be compared, leaves the check not judged for it."""
    if after is None:
        why = f"{node}: no clock-event counters read after the run (the after job did not answer for it)"
        return Judged(findings=(Finding.on_node(node, why, severity="not_judged"),))
    length = after.time_s - before.time_s
    later = {g.index: g for g in after.gpus}
    verdicts, unjudged, findings = [], [], []
    missing: set[str] = set()
    for g in before.gpus:
        where, now = f"{node}:gpu{g.index}", later.get(g.index)
        if not g.slowed_ns or now is None or length <= 0:
            why = "NVML keeps no clock-event counters on it" if not g.slowed_ns else "not read after the run"
            findings.append(
                Finding.on_node(node, f"{where}: time slowed not judged: {why}", gpu=g.index, severity="not_judged")
            )
            continue
        times = {r: _seconds(g, now, r, length) for r in WORDS}
        hw_parts = [times[r] for r in HW_REASONS]
        hw = None if None in hw_parts else sum(t for t in hw_parts if t is not None)
        detail = _detail(times, length)
        for metric, seconds in ((HW, hw), (SW_THERMAL, times["sw_thermal"])):
            if seconds is None:
                why = (
                    f"{where}: {metric} not judged: its counters are not comparable across the run (one missing, "
                    "reset by a driver reload, or rising faster than time: a field the driver numbers otherwise)"
                )
                findings.append(Finding.on_node(node, why, gpu=g.index, severity="not_judged"))
                continue
            m = Measurement.at(metric, 100 * seconds / length, "%", node, gpu=g.index, detail=detail, job_id=job_id)
            line = thresholds.get(metric)
            if line is None:
                unjudged.append(m)
                missing.add(metric)
                continue
            verdict = judge(m, line)
            verdicts.append(verdict)
            if verdict.status in ("fail", "warn") and (f := verdict.finding()) is not None:
                findings.append(f)
    findings.extend(lines.missing_line(thresholds, metric, [node], GUIDE) for metric in sorted(missing))
    return Judged(tuple(verdicts), tuple(unjudged), tuple(findings))

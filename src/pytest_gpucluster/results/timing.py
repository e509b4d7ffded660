"""Where a run's time went, from its tests' job records: the workloads' time on the nodes per area,
the harness's share of the wall time (submission, queueing, start-up, result pickup, pytest
itself) split by phase, and the job whose tasks waited longest in start-up. Pure: plain dicts in,
plain dicts and sentences out; written into the results under ``timing``."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any


def union_s(spans: Iterable[tuple[float, float]]) -> float:
    """Seconds covered by the union of ``(start, end)`` intervals (overlaps counted once)."""
    total, reach = 0.0, float("-inf")
    for start, end in sorted(spans):
        if end <= reach:
            continue
        total += end - max(start, reach)
        reach = end
    return total


def _job_phases(job: dict[str, Any], phases: dict[str, list[tuple[float, float]]]) -> None:
    """A job's harness phases as (start, end) epoch spans: submission to its first process
    (Slurm's scheduling and the step's launch), that process's start-up until the workload's
    clock started (interpreter, imports), and the workload's end until its results were read."""
    ran_from, ran_to = float(job["ran_from"]), float(job["ran_to"])
    submitted, process, seen = (float(job.get(k) or 0.0) for k in ("submitted_at", "process_from", "seen_at"))
    if submitted and process and submitted <= process <= ran_from:
        phases["scheduling"].append((submitted, process))
        phases["start_up"].append((process, ran_from))
    elif submitted and submitted <= ran_from:
        phases["scheduling"].append((submitted, ran_from))
    if seen and seen >= ran_to:
        phases["pickup"].append((ran_to, seen))


def _slower_start_up(slowest: dict[str, Any], job: Mapping[str, Any]) -> dict[str, Any]:
    """Of ``slowest`` and ``job``, the job whose tasks waited longest in start-up (median wall
    less median CPU), as {job_id, name, tasks, wall_median_s, wall_max_s, cpu_median_s}."""
    start_up = job.get("start_up") or {}
    if not start_up:
        return slowest

    def waited(s: Mapping[str, Any]) -> float:
        return float(s.get("wall_median_s", 0.0)) - float(s.get("cpu_median_s", 0.0))

    if slowest and waited(slowest) >= waited(start_up):
        return slowest
    return {"job_id": str(job.get("job_id")), "name": str(job.get("name", "")), **start_up}


def start_up_note(timing: Mapping[str, Any]) -> str:
    """One sentence when a job's tasks waited in start-up: the median task took at least a
    second and three times its CPU from its process's start to the workload's. The usual cause
    on a cluster is every task importing a Python environment from a shared filesystem at
    once; on an oversubscribed node, tasks waiting for CPUs. Empty otherwise."""
    s = timing.get("slowest_start_up") or {}
    wall, cpu = float(s.get("wall_median_s", 0.0)), float(s.get("cpu_median_s", 0.0))
    if not s or wall - cpu < 1.0 or wall < 3 * cpu:
        return ""
    return (
        f"task start-up waited: job {s['job_id']} ({s['name']}), {int(s['tasks'])} tasks, took a median "
        f"{wall:.1f} s (slowest {float(s['wall_max_s']):.1f} s) from process start to workload for {cpu:.2f} s "
        "of CPU; the tasks waited on files (a Python environment on a shared filesystem?) or on CPUs"
    )


def _harness_parts(
    workload: list[tuple[float, float]], phases: dict[str, list[tuple[float, float]]], harness_s: float
) -> dict[str, float]:
    """The harness time split by what it was spent on: each phase counts only the time no
    workload and no earlier phase (in the order scheduling, start-up, pickup) already covers, so
    the parts add up to the harness time; "between_jobs" is the rest (pytest, the login node's
    own checks, a previous job still ending)."""
    parts: dict[str, float] = {}
    covered = list(workload)
    for name in ("scheduling", "start_up", "pickup"):
        before = union_s(covered)
        covered += phases[name]
        parts[f"{name}_s"] = round(union_s(covered) - before, 1)
    parts["between_jobs_s"] = round(max(0.0, harness_s - sum(parts.values())), 1)
    return parts


def timing_summary(tests: Iterable[dict[str, Any]], wall_s: float) -> dict[str, Any]:
    """Where the run's time went: per area the tests' own durations (setup + call + teardown)
    and the time its workloads ran on the nodes (first task's start to last task's end of each
    job, or of the area's part of a job that serves several; overlaps counted once); overall,
    the harness's share, i.e. wall time minus the time any workload was running (submission,
    queueing, start-up, collection, pytest itself)."""
    areas: dict[str, dict[str, Any]] = {}
    spans: dict[str, tuple[float, float]] = {}
    phases: dict[str, list[tuple[float, float]]] = {"scheduling": [], "start_up": [], "pickup": []}
    slowest: dict[str, Any] = {}
    for test in tests:
        area = areas.setdefault(str(test.get("area", "tests")), {"tests": 0, "duration_s": 0.0, "spans": {}})
        area["tests"] += 1
        area["duration_s"] += float(test.get("duration_s") or 0.0)
        for job in test.get("jobs", []):
            if "ran_from" in job and "ran_to" in job:
                span = (float(job["ran_from"]), float(job["ran_to"]))
                part = (job.get("parts") or {}).get(str(test.get("area")))
                # A job serving several areas says when each one's part ran (``note_parts``).
                area["spans"][str(job.get("job_id"))] = (float(part[0]), float(part[1])) if part else span
                if str(job.get("job_id")) not in spans:
                    _job_phases(job, phases)
                    slowest = _slower_start_up(slowest, job)
                spans[str(job.get("job_id"))] = span
    workload = union_s(spans.values())
    return {
        "wall_s": round(wall_s, 1),
        "workload_s": round(workload, 1),
        "harness_s": round(wall_s - workload, 1),
        "harness_fraction": round((wall_s - workload) / wall_s, 3) if wall_s > 0 else None,
        "harness_parts": _harness_parts(list(spans.values()), phases, wall_s - workload),
        "jobs": len(spans),
        "slowest_start_up": slowest,
        "areas": {
            name: {
                "tests": a["tests"],
                "duration_s": round(a["duration_s"], 1),
                "workload_s": round(union_s(a["spans"].values()), 1),
                "jobs": len(a["spans"]),
            }
            for name, a in areas.items()
        },
    }

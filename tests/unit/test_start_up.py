"""Task start-up: how long a job's tasks took from process start to workload, against their CPU."""

from __future__ import annotations

from pytest_gpucluster.launch import TaskResult, start_up_summary
from pytest_gpucluster.report.html import timing_block
from pytest_gpucluster.results.timing import start_up_note, timing_summary


def _task(rank: int, process: float, started: float, cpu: float) -> TaskResult[None]:
    return TaskResult("7", "node1", rank, rank, 0, None, started, started + 1.0, process, cpu)


def test_summary_gives_median_and_slowest_wall_and_median_cpu():
    tasks = [_task(0, 100.0, 100.2, 0.15), _task(1, 100.0, 100.4, 0.2), _task(2, 100.1, 103.1, 0.25)]
    assert start_up_summary(tasks) == {"tasks": 3, "wall_median_s": 0.4, "wall_max_s": 3.0, "cpu_median_s": 0.2}


def test_summary_leaves_out_tasks_that_did_not_say():
    # Results written before these fields existed carry zeros.
    assert start_up_summary([_task(0, 0.0, 100.0, 0.0)]) == {}
    assert start_up_summary([_task(0, 0.0, 100.0, 0.0), _task(1, 99.0, 100.0, 0.1)])["tasks"] == 1


def _run(*start_ups: dict[str, float]) -> dict:
    jobs = [
        {"job_id": str(10 + i), "name": f"job{i}", "ran_from": 100.0 + i, "ran_to": 101.0 + i, "start_up": s}
        for i, s in enumerate(start_ups)
    ]
    return timing_summary([{"area": "placement", "jobs": jobs}], wall_s=30.0)


def test_the_job_that_waited_longest_is_named_and_explained():
    quick = {"tasks": 16, "wall_median_s": 0.3, "wall_max_s": 0.4, "cpu_median_s": 0.25}
    waited = {"tasks": 512, "wall_median_s": 4.2, "wall_max_s": 6.0, "cpu_median_s": 0.3}
    timing = _run(quick, waited, quick)
    assert timing["slowest_start_up"] == {"job_id": "11", "name": "job1", **waited}
    note = start_up_note(timing)
    assert "job 11 (job1), 512 tasks" in note
    assert "median 4.2 s (slowest 6.0 s)" in note and "0.30 s of CPU" in note


def test_start_up_that_is_mostly_cpu_or_short_says_nothing():
    # Heavy imports (torch) take CPU: a long start-up that is its own CPU is not waiting.
    assert start_up_note(_run({"tasks": 8, "wall_median_s": 3.0, "wall_max_s": 3.5, "cpu_median_s": 2.4})) == ""
    # Three times the CPU but under a second of waiting.
    assert start_up_note(_run({"tasks": 8, "wall_median_s": 0.9, "wall_max_s": 1.0, "cpu_median_s": 0.1})) == ""
    assert start_up_note(_run()) == "" and _run()["slowest_start_up"] == {}


def test_the_report_names_the_job_that_waited():
    timing = _run({"tasks": 512, "wall_median_s": 4.2, "wall_max_s": 6.0, "cpu_median_s": 0.3})
    block = timing_block({"timing": timing})
    assert "Task start-up waited: job 10 (job0), 512 tasks" in block
    assert "start-up waited" not in timing_block({"timing": _run()})

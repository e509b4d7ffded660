"""Results file pieces that need no pytest run: node ids, job log tails, loading."""

from __future__ import annotations

import json

import pytest

from pytest_gpucluster.results import codec
from pytest_gpucluster.results.document import ResultsDocument, job_log_tails
from pytest_gpucluster.results.timing import timing_summary, union_s
from pytest_gpucluster.verdict.check import split_nodeid


def test_nodeid_names_area_function_and_parameters():
    assert split_nodeid("tests/acceptance/test_nccl.py::test_busbw[node1-all_reduce]") == (
        "nccl",
        "test_busbw",
        "node1-all_reduce",
    )
    assert split_nodeid("baseline::test_no_regression_against_baseline") == (
        "baseline",
        "test_no_regression_against_baseline",
        "",
    )


def test_log_tails_follow_submitits_names(tmp_path):
    # submitit writes <folder>/<job id>_<task>_log.{out,err}
    (tmp_path / "123_0_log.err").write_text("\n".join(f"line {i}" for i in range(100)))
    (tmp_path / "123_1_log.err").write_text("")
    (tmp_path / "123_0_log.out").write_text("stdout")
    (tmp_path / "1234_0_log.err").write_text("another job")
    (tail,) = job_log_tails(tmp_path, "123")
    assert tail["path"].endswith("123_0_log.err") and tail["tail"].splitlines()[-1] == "line 99"
    assert len(tail["tail"].splitlines()) == 30
    (tmp_path / "123_0_log.err").write_text("")
    assert [t["tail"] for t in job_log_tails(tmp_path, "123")] == ["stdout"]
    assert job_log_tails(tmp_path / "gone", "123") == []


def test_load_results_rejects_other_files(tmp_path):
    path = tmp_path / "r.json"
    path.write_text(json.dumps({"schema_version": codec.SCHEMA_VERSION, "tests": []}))
    assert codec.load(path)["tests"] == []
    path.write_text("[]")
    with pytest.raises(ValueError, match="not a pytest-gpucluster results file"):
        codec.load(path)
    path.write_text("{")
    with pytest.raises(ValueError, match="not a JSON results file"):
        codec.load(path)


def test_union_counts_overlapping_workloads_once():
    assert union_s([]) == 0.0
    assert union_s([(0.0, 10.0), (5.0, 12.0), (20.0, 21.0), (20.5, 20.7)]) == pytest.approx(13.0)


def test_timing_summary_splits_wall_time_into_workloads_and_harness():
    tests = [
        {"area": "nccl", "duration_s": 12.0, "jobs": [{"job_id": "7", "ran_from": 100.0, "ran_to": 110.0}]},
        # A cached job judged by a second test is counted once.
        {"area": "nccl", "duration_s": 0.5, "jobs": [{"job_id": "7", "ran_from": 100.0, "ran_to": 110.0}]},
        {
            "area": "compute",
            "duration_s": 6.0,
            "jobs": [{"job_id": "8", "ran_from": 111.0, "ran_to": 116.0}, {"job_id": "9"}],
        },  # no timing: not counted
        {"area": "slurm_health", "duration_s": 1.0, "jobs": []},
    ]
    t = timing_summary(tests, wall_s=20.0)
    overall = (t["wall_s"], t["workload_s"], t["harness_s"], t["harness_fraction"], t["jobs"])
    assert overall == (20.0, 15.0, 5.0, 0.25, 2)
    assert t["areas"]["nccl"] == {"tests": 2, "duration_s": 12.5, "workload_s": 10.0, "jobs": 1}
    assert t["areas"]["compute"]["workload_s"] == 5.0
    assert t["areas"]["slurm_health"] == {"tests": 1, "duration_s": 1.0, "workload_s": 0.0, "jobs": 0}


def test_harness_time_is_split_by_phase_without_counting_any_second_twice():
    tests = [
        # Submitted at 98, process at 99, clock from 100 to 110, results read at 110.5.
        {
            "area": "nccl",
            "jobs": [
                {
                    "job_id": "7",
                    "submitted_at": 98.0,
                    "process_from": 99.0,
                    "ran_from": 100.0,
                    "ran_to": 110.0,
                    "seen_at": 110.5,
                }
            ],
        },
        # Submitted while job 7 ran (that second is workload time, not scheduling), no process time.
        {
            "area": "compute",
            "jobs": [{"job_id": "8", "submitted_at": 109.0, "ran_from": 112.0, "ran_to": 115.0, "seen_at": 115.25}],
        },
    ]
    t = timing_summary(tests, wall_s=20.0)
    assert t["workload_s"] == 13.0 and t["harness_s"] == 7.0
    # scheduling: 98-99 and 110-112 less 110-110 workload → 1 + 2 = 3; start-up 99-100 = 1;
    # pickup: 110-110.5 is inside job 8's scheduling span already, 115-115.25 → 0.25 (rounded 0.2).
    assert t["harness_parts"] == {"scheduling_s": 3.0, "start_up_s": 1.0, "pickup_s": 0.2, "between_jobs_s": 2.8}


def test_checkpoint_rewrites_after_a_test_unless_the_last_rewrite_was_just_now(tmp_path):
    path = tmp_path / "results.json"
    doc = ResultsDocument(profile="p")
    assert doc.checkpoint(path)  # the first one always writes
    first = path.read_text()
    doc.status = "complete"
    # A rewrite that took long ended a moment ago: the next test's end does not rewrite yet.
    doc._write_s = 3600.0
    assert not doc.checkpoint(path)
    assert path.read_text() == first
    # A quick one long enough ago: it does.
    doc._write_s = 0.0
    assert doc.checkpoint(path)
    assert json.loads(path.read_text())["status"] == "complete"
    # The run's end writes whatever the last rewrite cost.
    doc._write_s = 3600.0
    doc.finished = "now"
    doc.write(path)
    assert json.loads(path.read_text())["finished"] == "now"

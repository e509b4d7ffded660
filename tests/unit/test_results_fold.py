"""Results file pieces that need no pytest run: node ids, job log tails, loading."""

from __future__ import annotations

import json

import pytest

from pytest_gpucluster.results import SCHEMA_VERSION, job_log_tails, load_results, split_nodeid


def test_nodeid_names_area_function_and_parameters():
    assert split_nodeid("tests/acceptance/test_nccl.py::test_busbw[node1-all_reduce]") == (
        "nccl", "test_busbw", "node1-all_reduce")  # fmt: skip
    assert split_nodeid("baseline::test_no_regression_against_baseline") == (
        "baseline", "test_no_regression_against_baseline", "")  # fmt: skip


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
    path.write_text(json.dumps({"schema_version": SCHEMA_VERSION, "tests": []}))
    assert load_results(path)["tests"] == []
    path.write_text("[]")
    with pytest.raises(ValueError, match="not a pytest-gpucluster results file"):
        load_results(path)
    path.write_text("{")
    with pytest.raises(ValueError, match="not a JSON results file"):
        load_results(path)

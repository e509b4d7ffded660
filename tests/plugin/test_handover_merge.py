"""``--gpucluster-merge-results``: a re-test merged with an earlier run into one handover verdict. A node whose
earlier rejection was decided by a check counts as accepted only once that check passed again;
the exit status follows the handover verdict."""

from __future__ import annotations

import json
import socket

import pytest

SUITE = """
import os

def test_planted(judge, node):
    bad = os.environ.get("PLANT_FAULT") == "1"
    judge.problems([f"{node}: planted fault"] if bad else [], "planted")

def test_other(judge, node):
    judge.problems([], "other")
"""


@pytest.fixture
def suite(gpc: pytest.Pytester) -> pytest.Pytester:
    gpc.makepyfile(test_suite=SUITE)
    return gpc


def _run(suite, monkeypatch, fault: bool, *args: str):
    monkeypatch.setenv("PLANT_FAULT", "1" if fault else "0")
    return suite.runpytest_subprocess(*args)


def test_a_repaired_node_retested_merges_into_accepted(suite, monkeypatch):
    node = socket.gethostname()
    first = _run(suite, monkeypatch, True, "--gpucluster-results=first.json")
    assert first.ret == 1
    earlier = json.loads((suite.path / "first.json").read_text())
    assert earlier["acceptance"]["nodes"]["verdicts"][node]["checks"] == ["test_planted"]
    again = _run(suite, monkeypatch, False, "--gpucluster-results=again.json", "--gpucluster-merge-results=first.json")
    assert again.ret == 0, again.stdout.str()
    merged = json.loads((suite.path / "again.json").read_text())["handover"]
    assert merged["verdict"] == "ACCEPTED" and merged["summary"] == "1 of 1 node accepted"
    assert merged["earlier"].endswith("first.json") and merged["retested"] == [node]
    again.stdout.fnmatch_lines([f"handover with *first.json: ACCEPTED: 1 of 1 node accepted; re-tested now: {node}"])


def test_a_retest_that_skips_the_deciding_check_is_incomplete(suite, monkeypatch):
    node = socket.gethostname()
    _run(suite, monkeypatch, True, "--gpucluster-results=first.json")
    again = _run(
        suite,
        monkeypatch,
        False,
        "--gpucluster-merge-results=first.json",
        "--gpucluster-results=again.json",
        "-k",
        "other",
    )
    assert again.ret == 10, again.stdout.str()
    merged = json.loads((suite.path / "again.json").read_text())["handover"]
    assert merged["verdict"] == "INCOMPLETE"
    assert merged["nodes"][node]["reasons"][0].startswith(f"{node}: the re-test did not pass again test_planted")


def test_a_fault_still_there_keeps_the_node_rejected(suite, monkeypatch):
    _run(suite, monkeypatch, True, "--gpucluster-results=first.json")
    again = _run(suite, monkeypatch, True, "--gpucluster-merge-results=first.json", "--gpucluster-results=again.json")
    assert again.ret == 1
    assert json.loads((suite.path / "again.json").read_text())["handover"]["verdict"] == "REJECTED"


def test_a_file_that_is_not_results_is_a_usage_error_naming_the_option(suite):
    (suite.path / "x.json").write_text("{}")
    result = suite.runpytest_subprocess("--gpucluster-merge-results=x.json")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--gpucluster-merge-results=x.json: *not a pytest-gpucluster results file*"])


def test_nodes_is_for_slurm_profiles(suite):
    result = suite.runpytest_subprocess("--gpucluster-nodes=node[1-2]")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--gpucluster-nodes=node[[]1-2[]]: profile 'local' uses the local executor*"])

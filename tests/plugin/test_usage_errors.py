"""Bad options are usage errors before any job (exit 4), naming the option and its value: files the
run could not write at its end, earlier results it cannot read or that belong to another cluster,
and ``--gpucluster-nodes`` that is no hostlist."""

from __future__ import annotations

import json

import pytest

# A check that leaves a mark when it runs: a usage error must come before any of it.
SUITE = """
from pathlib import Path

from pytest_gpucluster.verdict import Measurement

def test_free_space(judge):
    Path("ran").write_text("yes")
    judge(Measurement("sharedfs.free", 50.0, "GiB", where="node1"))
"""


@pytest.fixture
def suite(gpc: pytest.Pytester) -> pytest.Pytester:
    gpc.makepyfile(test_suite=SUITE)
    return gpc


def _usage_error(suite: pytest.Pytester, *args: str) -> str:
    result = suite.runpytest_subprocess(*args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.stdout.str() + result.stderr.str()
    assert not (suite.path / "ran").exists(), "a check ran before the usage error"
    return result.stderr.str()


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("--gpucluster-results", "/proc/nowhere/r.json"),
        ("--html", "/proc/nowhere/report.html"),
        ("--gpucluster-calibrate", "/proc/nowhere/fragment.toml"),
    ],
)
def test_a_file_the_run_cannot_write_is_refused_before_any_check(suite, option, value):
    extra = ("--self-contained-html",) if option == "--html" else ()
    err = _usage_error(suite, f"{option}={value}", *extra)
    assert f"{option}={value}: cannot write in /proc, where its folder /proc/nowhere would be made" in err


def test_a_folder_given_for_a_file_is_refused(suite):
    (suite.path / "out").mkdir()
    err = _usage_error(suite, "--gpucluster-results=out")
    assert "--gpucluster-results=out: " in err and "/out is a folder; name a file in it." in err


def test_a_file_in_a_folder_still_to_be_made_is_written(suite):
    result = suite.runpytest_subprocess("--gpucluster-results=new/deeper/r.json")
    assert result.ret == 0
    assert json.loads((suite.path / "new" / "deeper" / "r.json").read_text())["acceptance"]["verdict"] == "ACCEPTED"


def test_a_baseline_that_cannot_be_read_is_refused(suite):
    err = _usage_error(suite, "--gpucluster-baseline=gone.json")
    assert "--gpucluster-baseline=gone.json: " in err and "No such file" in err
    (suite.path / "garbage.json").write_text("{not json")
    err = _usage_error(suite, "--gpucluster-baseline=garbage.json")
    assert "--gpucluster-baseline=garbage.json: " in err and "not a JSON results file" in err


@pytest.fixture
def earlier(suite: pytest.Pytester) -> dict:
    """The results of a full local run on this machine."""
    assert suite.runpytest_subprocess("--gpucluster-results=first.json").ret == 0
    (suite.path / "ran").unlink()
    return json.loads((suite.path / "first.json").read_text())


def test_merging_the_results_of_another_profile_is_refused(suite, earlier):
    # A local run's file (its node is this machine) merged into a re-test of node2 of the ci cluster.
    err = _usage_error(suite, "--cluster=ci", "--gpucluster-nodes=node2", "--gpucluster-merge-results=first.json")
    assert "--gpucluster-merge-results=first.json: a run of profile 'local' (executor local, nodes: " in err
    assert "this run is of profile 'ci'. Merge with the results of a run of 'ci'." in err


def test_merging_the_results_of_other_nodes_is_refused(suite, earlier):
    # The same profile, but measured on another machine ("vm"): this machine was never in it.
    host = earlier["nodes"][0]
    text = (suite.path / "first.json").read_text().replace(json.dumps(host), '"vm-elsewhere"')
    (suite.path / "elsewhere.json").write_text(text)
    err = _usage_error(suite, "--gpucluster-merge-results=elsewhere.json")
    assert f"--gpucluster-merge-results=elsewhere.json: {host} was not in that run (its nodes: vm-elsewhere" in err


def test_merging_with_this_machines_own_results_runs(suite, earlier):
    result = suite.runpytest_subprocess("--gpucluster-merge-results=first.json", "--gpucluster-results=again.json")
    assert result.ret == 0, result.stdout.str()
    assert json.loads((suite.path / "again.json").read_text())["handover"]["verdict"] == "ACCEPTED"


@pytest.mark.parametrize(
    ("hostlist", "said"),
    [
        ("node[", "--gpucluster-nodes=node[: '[' at character 5 is never closed: 'node['"),
        ("node[3-1]", "--gpucluster-nodes=node[3-1]: '3-1' in 'node[3-1]' counts down; write 1-3"),
        ("node]", "--gpucluster-nodes=node]: ']' at character 5 closes no '['"),
        ("node[1-2;3]", "'1-2;3' in 'node[1-2;3]' is not a number or a range"),
    ],
)
def test_a_nodes_value_that_is_no_hostlist_is_refused_with_the_reason(suite, hostlist, said):
    err = _usage_error(suite, "--cluster=ci", f"--gpucluster-nodes={hostlist}")
    assert said in err

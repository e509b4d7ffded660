"""The run's verdict and exit status as an operator meets them: each case of the verdict rule
(docs/report.md) through a real pytest run of the plugin."""

from __future__ import annotations

import json

import pytest

SUITE = """
import os
import warnings

import pytest

from pytest_gpucluster.outcomes import GpuClusterWarning, not_applicable
from pytest_gpucluster.verdict import Finding, Measurement

CASE = os.environ.get("CASE", "")


@pytest.mark.quick
def test_free_space(judge):
    judge(Measurement("sharedfs.free", 50.0 if CASE not in ("fail", "setting") else 0.5, "GiB", where="node1"))


def test_temperature(judge):
    if CASE == "harness":
        raise AttributeError("'NoneType' object has no attribute 'value'")
    if CASE == "skip":
        pytest.skip("node1 is excluded: Slurm reports it DRAIN (bad DIMM)")
    judge(Measurement("gpu.temperature", 80.0 if CASE == "warn" else 40.0, "C", where="node1:gpu0"))


def test_cgroups(judge):
    if CASE == "warn":
        warnings.warn(GpuClusterWarning("node1: device cgroups are off"), stacklevel=1)
    if CASE == "setting":
        swap = Finding.of_setting(
            "node1", "swap", "node1: 8 GiB of swap", found="8 GiB", expected="0", remedy="swapoff -a", severity="warn"
        )
        judge.findings([swap], "node1: swap configured")


def test_ports(judge):
    not_applicable("profile 'local' expects no InfiniBand (ib_hcas = 0)")


@pytest.mark.across_nodes
def test_across(judge):
    pass


@pytest.mark.slow
def test_burn(judge):
    pass
"""


@pytest.fixture
def suite(gpc: pytest.Pytester) -> pytest.Pytester:
    gpc.makepyfile(test_suite=SUITE)
    return gpc


def _run(suite: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, case: str, *args: str):
    monkeypatch.setenv("CASE", case)
    result = suite.runpytest_subprocess("--gpucluster-results=r.json", *args)
    return result, json.loads((suite.path / "r.json").read_text())


def test_all_required_checks_passed_is_accepted_exit_0(suite, monkeypatch):
    result, doc = _run(suite, monkeypatch, "", "-m", "not slow")
    assert result.ret == 0
    result.stdout.fnmatch_lines(["*gpucluster: ACCEPTED (3 pass, 2 n/a)*"])
    assert doc["acceptance"]["verdict"] == "ACCEPTED"
    sel = doc["selection"]
    assert sel["markexpr"] == "not slow" and sel["optional"] == ["test_suite.py::test_burn"]
    # Known before any job: from markers; found at run time: from not_applicable() in the check.
    assert sel["not_applicable"] == {"test_suite.py::test_across": "profile 'local' has 1 node; this check needs 2"}
    assert (
        "test_suite.py::test_ports: profile 'local' expects no InfiniBand (ib_hcas = 0)"
        in (doc["acceptance"]["not_applicable"])
    )
    verdicts = {t["name"]: t["verdict"] for t in doc["tests"]}
    assert verdicts["test_ports"] == "n/a" and verdicts["test_across"] == "n/a"


def test_a_failure_rejects_exit_1_with_the_culprit_first(suite, monkeypatch):
    result, doc = _run(suite, monkeypatch, "fail")
    assert result.ret == 1
    result.stdout.fnmatch_lines(
        ["*gpucluster: REJECTED: 1 check failed*", "  node1: sharedfs.free = 0.5 GiB is below the fail line 1 GiB*"]
    )
    assert doc["acceptance"]["reasons"][0].startswith("node1: sharedfs.free = 0.5 GiB is below the fail line")


def test_a_setting_that_only_warns_follows_the_failure_with_its_change(suite, monkeypatch):
    result, _ = _run(suite, monkeypatch, "setting")
    assert result.ret == 1
    # The culprit first; swap explains no shortage of free space.
    result.stdout.fnmatch_lines(
        [
            "*gpucluster: REJECTED: 1 check failed*",
            "  node1: sharedfs.free = 0.5 GiB is below the fail line*",
            "node configuration to change (no check failed for it):",
            "  node1: warn swap: 8 GiB, expected 0; to change: swapoff -a",
            "  node1: also failed or warned: test_suite.py::test_free_space",
        ]
    )


def test_a_skipped_required_check_is_incomplete_exit_10(suite, monkeypatch):
    result, doc = _run(suite, monkeypatch, "skip")
    assert result.ret == 10
    result.stdout.fnmatch_lines(
        ["*gpucluster: INCOMPLETE*", "*test_suite.py::test_temperature: not judged: node1 is excluded: Slurm reports*"]
    )
    assert doc["acceptance"]["verdict"] == "INCOMPLETE"


def test_an_error_before_judging_is_incomplete_not_a_pass(suite, monkeypatch):
    result, doc = _run(suite, monkeypatch, "harness")
    assert result.ret == 1  # pytest's own status for an error stays
    assert doc["acceptance"]["verdict"] == "INCOMPLETE"
    assert doc["acceptance"]["reasons"][0].startswith(
        "test_suite.py::test_temperature: could not be judged (AttributeError)"
    )


def test_warnings_reach_results_report_and_verdict(suite, monkeypatch):
    result, doc = _run(suite, monkeypatch, "warn", "--html=r.html", "--self-contained-html")
    assert result.ret == 0
    result.stdout.fnmatch_lines(["*gpucluster: ACCEPTED, 2 warnings (2 pass, 2 warn, 2 n/a)*"])
    cgroups = next(t for t in doc["tests"] if t["name"] == "test_cgroups")
    assert cgroups["verdict"] == "warn" and cgroups["warnings"] == ["node1: device cgroups are off"]
    html = (suite.path / "r.html").read_text()
    assert "node1: device cgroups are off" in html and "ACCEPTED, 2 warnings" in html


@pytest.mark.parametrize("how", [("-k", "free_space"), ("-m", "quick"), ("--deselect", "test_suite.py::test_cgroups")])
def test_a_narrower_selection_is_partial_and_exits_0(suite, monkeypatch, how):
    result, doc = _run(suite, monkeypatch, "", *how)
    assert result.ret == 0
    assert doc["acceptance"]["verdict"] == "PARTIAL", doc["acceptance"]
    assert doc["acceptance"]["headline"].startswith("PARTIAL: ")
    assert "required check" in doc["acceptance"]["headline"] and "not selected" in doc["acceptance"]["headline"]
    assert doc["selection"]["not_selected"]


def test_naming_a_file_or_a_test_is_partial(suite, monkeypatch):
    result, doc = _run(suite, monkeypatch, "", "test_suite.py::test_free_space")
    assert result.ret == 0 and doc["acceptance"]["verdict"] == "PARTIAL"
    assert doc["selection"]["named"] == ["test_suite.py::test_free_space"]
    result.stdout.fnmatch_lines(
        ["*PARTIAL: 1 selected check passed*", "*the command line names test_suite.py::test_free_space*"]
    )


def test_a_failure_in_a_partial_run_still_rejects(suite, monkeypatch):
    result, doc = _run(suite, monkeypatch, "fail", "-k", "free_space")
    assert result.ret == 1 and doc["acceptance"]["verdict"] == "REJECTED"


def test_the_slow_checks_are_required_when_the_profile_says_so(suite, monkeypatch):
    text = (suite.path / "thresholds.toml").read_text()
    (suite.path / "burn.toml").write_text(text + '\n[profiles.burn]\nextends = "local"\nrequire_slow = true\n')
    result, doc = _run(suite, monkeypatch, "", "--gpucluster-thresholds=burn.toml", "--cluster=burn", "-m", "not slow")
    assert result.ret == 0 and doc["acceptance"]["verdict"] == "PARTIAL"
    assert doc["selection"]["not_selected"] == ["test_suite.py::test_burn"]

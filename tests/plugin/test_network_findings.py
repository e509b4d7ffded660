"""A check that names a switch or a link beside its measurement (``judge.verdict(..., named=)``, as
the across-node rounds do) through a real pytest run of the plugin: the measurement is recorded,
the test fails by the finding, the run is REJECTED and no node is."""

from __future__ import annotations

import json

import pytest

SUITE = """
from pytest_gpucluster.config import Threshold
from pytest_gpucluster.verdict import Finding, Measurement, judge as decide

LINE = Threshold("nccl.all_reduce.inter_node", "GB/s", fail_below=40.0)
PAIR = ("gpu-01", "gpu-17")


def test_link(judge):
    m = Measurement.across("nccl.all_reduce.inter_node", 18.0, "GB/s", PAIR)
    link = Finding.in_network("link", ("leaf1", "leaf2"), PAIR, "the path between leaves leaf1 and leaf2: slow")
    judge.verdict(decide(m, LINE), m, m.metric, named=[link])


def test_wrong_without_a_bound(judge):
    m = Measurement.across("nccl.all_reduce.inter_node", 45.0, "GB/s", PAIR)
    wrong = Finding.across(PAIR, "round 2: 2 of 4 ranks returned wrong values")
    judge.verdict(None, m, m.metric, named=[wrong])
"""


@pytest.fixture
def suite(gpc: pytest.Pytester) -> pytest.Pytester:
    gpc.makepyfile(test_suite=SUITE)
    return gpc


def test_a_named_link_fails_the_test_and_the_run_and_rejects_no_node(suite):
    result = suite.runpytest_subprocess("--gpucluster-results=r.json")
    doc = json.loads((suite.path / "r.json").read_text())
    tests = {t["name"]: t for t in doc["tests"]}
    link = tests["test_link"]
    assert link["verdict"] == "fail", result.stdout.str()
    assert [(f["scope"], f["culprits"]) for f in link["findings"]] == [("link", ["leaf1", "leaf2"])]
    assert [m["status"] for m in link["measurements"]] == ["fail"]  # recorded, its own finding not
    wrong = tests["test_wrong_without_a_bound"]
    assert wrong["verdict"] == "fail" and wrong["findings"][0]["text"].endswith("returned wrong values")
    assert doc["acceptance"]["verdict"] == "REJECTED"
    assert "REJECTED" not in {v["verdict"] for v in doc["acceptance"]["nodes"]["verdicts"].values()}
    assert not doc["acceptance"]["nodes"]["exclude"]

"""The terminal's n/a count and its list of checks that do not apply count the same checks, also
when a check that does not apply is parametrised by a node that is skipped for another reason."""

from __future__ import annotations

import json

SUITE = """
import pytest

from pytest_gpucluster.verdict import Measurement


@pytest.mark.parametrize("host", ["node1", pytest.param("node2", marks=pytest.mark.skip(reason="node2 is excluded"))])
@pytest.mark.across_nodes
def test_pair(judge, host):
    pass


@pytest.mark.parametrize("host", ["node1", pytest.param("node2", marks=pytest.mark.skip(reason="node2 is excluded"))])
def test_temperature(judge, host):
    judge(Measurement("gpu.temperature", 40.0, "C", where=f"{host}:gpu0"))
"""


def test_n_a_is_counted_once_per_check_that_does_not_apply(gpc):
    gpc.makepyfile(test_suite=SUITE)
    result = gpc.runpytest_subprocess("--gpucluster-results=r.json", "-m", "not slow")
    doc = json.loads((gpc.path / "r.json").read_text())
    verdicts = {t["nodeid"].split("::")[1]: t["verdict"] for t in doc["tests"]}
    # The profile has one node: both pair checks are n/a, node2's as well (not "skipped").
    assert verdicts["test_pair[node1]"] == verdicts["test_pair[node2]"] == "n/a"
    assert verdicts["test_temperature[node2]"] == "not_judged"
    acc = doc["acceptance"]
    assert acc["counts"]["n/a"] == len(acc["not_applicable"]) == 2
    result.stdout.fnmatch_lines(
        ["*gpucluster: INCOMPLETE*(1 pass, 2 n/a, 1 not judged)*", "not applicable: 2 check(s)"]
    )
    assert result.ret == 10

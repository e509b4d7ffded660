"""``--gpucluster-merge-results`` without ``--gpucluster-nodes`` re-tests the earlier run's nodes
that were not accepted; a file that cannot say which is refused naming the option and what to do."""

from __future__ import annotations

import json

import pytest

from pytest_gpucluster.errors import ConfigError
from pytest_gpucluster.plugin import retest_nodes
from pytest_gpucluster.results import codec
from pytest_gpucluster.verdict.merge import retest_choice


def _earlier(tmp_path, verdicts, summary="x"):
    doc = {
        "schema_version": codec.SCHEMA_VERSION,
        "tests": [],
        "acceptance": {"nodes": {"summary": summary, "verdicts": {n: {"verdict": v} for n, v in verdicts.items()}}},
    }
    path = tmp_path / "first.json"
    path.write_text(json.dumps(doc))
    return path


def test_the_nodes_not_accepted_are_re_tested(tmp_path):
    path = _earlier(tmp_path, {"gpu-01": "ACCEPTED", "gpu-03": "REJECTED", "gpu-07": "INCOMPLETE"})
    assert retest_nodes(path, "--gpucluster-merge-results=first.json") == ("gpu-03", "gpu-07", "gpu-01")


@pytest.mark.parametrize(
    ("verdicts", "left", "partners"),
    [
        # one rejected node of two: its partner comes along, so the checks across nodes run for it
        ({"node1": "ACCEPTED", "node2": "REJECTED"}, ("node2",), ("node1",)),
        # of four: the first accepted node in the earlier run's order
        (
            {"node1": "ACCEPTED", "node2": "REJECTED", "node3": "ACCEPTED", "node4": "ACCEPTED"},
            ("node2",),
            ("node1",),
        ),
        # two left: still one accepted node beside them, known good, should one of them still fail
        ({"node1": "INCOMPLETE", "node2": "ACCEPTED", "node3": "REJECTED"}, ("node1", "node3"), ("node2",)),
        # a one-node cluster has nobody to pair with
        ({"node1": "REJECTED"}, ("node1",), ()),
        ({"node1": "REJECTED", "node2": "PARTIAL"}, ("node1", "node2"), ()),
    ],
)
def test_partners_are_added_for_the_checks_across_nodes(tmp_path, verdicts, left, partners):
    assert retest_choice(verdicts) == (left, partners)
    assert retest_nodes(_earlier(tmp_path, verdicts), "--gpucluster-merge-results=first.json") == (*left, *partners)


def test_a_run_that_accepted_every_node_leaves_nothing_to_re_test(tmp_path):
    path = _earlier(tmp_path, {"gpu-01": "ACCEPTED"}, summary="1 of 1 node accepted")
    with pytest.raises(
        ConfigError,
        match=r"--gpucluster-merge-results=first\.json: every node .*1 of 1 node accepted.*--gpucluster-nodes",
    ):
        retest_nodes(path, "--gpucluster-merge-results=first.json")


def test_a_file_without_verdicts_or_not_a_results_file_is_named(tmp_path):
    with pytest.raises(ConfigError, match=r"--gpucluster-merge-results=first\.json: the file holds no node verdicts"):
        retest_nodes(_earlier(tmp_path, {}), "--gpucluster-merge-results=first.json")
    other = tmp_path / "other.json"
    other.write_text("{}")
    with pytest.raises(
        ConfigError, match=r"--gpucluster-merge-results=other\.json: .*not a pytest-gpucluster results file"
    ):
        retest_nodes(other, "--gpucluster-merge-results=other.json")
    with pytest.raises(ConfigError, match=r"--gpucluster-merge-results=gone\.json: .*gone\.json"):
        retest_nodes(tmp_path / "gone.json", "--gpucluster-merge-results=gone.json")

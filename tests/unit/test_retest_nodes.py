"""``--gpucluster-merge-results`` without ``--gpucluster-nodes`` re-tests the earlier run's nodes
that were not accepted; a file that cannot say which is refused naming the option and what to do."""

from __future__ import annotations

import json

import pytest

from pytest_gpucluster.errors import ConfigError
from pytest_gpucluster.plugin import retest_nodes
from pytest_gpucluster.results import SCHEMA_VERSION


def _earlier(tmp_path, verdicts, summary="x"):
    doc = {
        "schema_version": SCHEMA_VERSION,
        "tests": [],
        "acceptance": {"nodes": {"summary": summary, "verdicts": {n: {"verdict": v} for n, v in verdicts.items()}}},
    }
    path = tmp_path / "first.json"
    path.write_text(json.dumps(doc))
    return path


def test_the_nodes_not_accepted_are_re_tested(tmp_path):
    path = _earlier(tmp_path, {"gpu-01": "ACCEPTED", "gpu-03": "REJECTED", "gpu-07": "INCOMPLETE"})
    assert retest_nodes(path, "--gpucluster-merge-results=first.json") == ("gpu-03", "gpu-07")


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

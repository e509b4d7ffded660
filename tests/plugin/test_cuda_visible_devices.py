"""The local executor under the caller's CUDA_VISIBLE_DEVICES, as far as a machine without GPUs
shows it: the restriction is recorded in the results, the report's header and pytest's, and a
value CUDA would misread is a usage error before any check."""

from __future__ import annotations

import json

import pytest

SUITE = """
from pathlib import Path

from pytest_gpucluster.verdict import Measurement

def test_free_space(judge):
    Path("ran").write_text("yes")
    judge(Measurement("sharedfs.free", 50.0, "GiB", where="node1"))
"""


def test_the_restriction_is_recorded_and_shown(gpc, monkeypatch):
    gpc.makepyfile(test_suite=SUITE)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1,2")
    result = gpc.runpytest_subprocess(
        "--cluster=local", "--gpucluster-results=r.json", "--html=r.html", "--self-contained-html"
    )
    assert result.ret == 0, result.stdout.str()
    result.stdout.fnmatch_lines(["gpucluster: the node is CUDA_VISIBLE_DEVICES=0,1,2: no GPU on this machine*"])
    doc = json.loads((gpc.path / "r.json").read_text())
    assert doc["environment"]["cuda_visible_devices"] == "CUDA_VISIBLE_DEVICES=0,1,2: no GPU on this machine"
    assert doc["cluster"]["gpus_per_node"] == 0
    html = (gpc.path / "r.html").read_text()
    assert "1 node, no GPU devices (cpu); CUDA_VISIBLE_DEVICES=0,1,2: no GPU on this machine" in html


def test_without_the_variable_nothing_is_recorded(gpc, monkeypatch):
    gpc.makepyfile(test_suite=SUITE)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    result = gpc.runpytest_subprocess("--cluster=local", "--gpucluster-results=r.json")
    assert result.ret == 0
    assert "cuda_visible_devices" not in json.loads((gpc.path / "r.json").read_text())["environment"]
    assert "gpucluster: the node is" not in result.stdout.str()


@pytest.mark.parametrize(
    ("value", "said"), [("MIG-5c3e1a", "'MIG-5c3e1a' is a MIG device"), ("gpu0", "'gpu0' is neither a GPU index")]
)
def test_a_value_cuda_would_misread_is_a_usage_error(gpc, monkeypatch, value, said):
    gpc.makepyfile(test_suite=SUITE)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", value)
    result = gpc.runpytest_subprocess("--cluster=local")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert f"CUDA_VISIBLE_DEVICES={value}: {said}" in result.stderr.str()
    assert not (gpc.path / "ran").exists()

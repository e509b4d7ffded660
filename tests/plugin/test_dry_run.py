"""``--gpucluster-dry-run`` on the project's own acceptance suite: the plan is printed and stored, nothing is
submitted, and the verdict is not taken (no test ran)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def suite(gpc: pytest.Pytester) -> pytest.Pytester:
    shutil.copytree(REPO / "tests" / "acceptance", gpc.path / "acceptance")
    return gpc


def test_dry_run_prints_the_plan_and_submits_nothing(suite, monkeypatch, tmp_path):
    monkeypatch.setenv("TMPDIR", str(tmp_path))  # the local executor's job folder would appear here
    result = suite.runpytest_subprocess("acceptance", "--gpucluster-dry-run", "--gpucluster-results=out.json")
    assert result.ret == 0, result.stdout.str()
    result.stdout.fnmatch_lines(
        [
            "*gpucluster plan: * job(s), nothing submitted*",
            "node-probe: rides in nccl-intra; *",
            "placement: job of its own, started ahead, 2 parameter sets; *",
            "sharedfs: job of its own, started ahead; *",
        ]
    )
    assert not list(tmp_path.glob("pytest-gpucluster-jobs-*"))
    doc = json.loads((suite.path / "out.json").read_text())
    keys = {j["key"]: j for j in doc["plan"]["jobs"]}
    assert keys["placement"]["ahead"] and keys["sharedfs"]["ahead"]
    assert keys["node-probe"]["rides_in"] == "nccl-intra" and not keys["node-probe"]["ahead"]
    assert not any(t["outcome"] == "passed" for t in doc["tests"])

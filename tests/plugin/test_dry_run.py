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
            "placement-one-task: job of its own, started ahead; *",
            "placement-two-tasks: job of its own, started ahead; *",
            "sharedfs: job of its own, started ahead; *",
        ]
    )
    assert not list(tmp_path.glob("pytest-gpucluster-jobs-*"))
    doc = json.loads((suite.path / "out.json").read_text())
    keys = {j["key"]: j for j in doc["plan"]["jobs"]}
    assert keys["placement-one-task"]["ahead"] and keys["sharedfs"]["ahead"]
    assert keys["node-probe"]["rides_in"] == "nccl-intra" and not keys["node-probe"]["ahead"]
    assert not any(t["outcome"] == "passed" for t in doc["tests"])


BIG = """
[profiles.tree]
executor = "slurm"
partition = "gpu"
nodes = 4
gpus_per_node = 8
nodelist = ["gpu1", "gpu2", "gpu3", "gpu4"]
topology_file = "tree.conf"
"""


def test_a_dry_run_that_cannot_read_the_nodes_states_plans_from_the_list_and_says_so(suite, monkeypatch):
    # No Slurm answers here: without its configuration the client keeps trying for a minute (or is
    # not installed at all). The dry run asks once within its bound, plans the rounds from the
    # profile's nodes and tree, and says whose states it does not know.
    (suite.path / "thresholds.toml").write_text((suite.path / "thresholds.toml").read_text() + BIG)
    (suite.path / "tree.conf").write_text("SwitchName=leafa Nodes=gpu[1-2]\nSwitchName=leafb Nodes=gpu[3-4]\n")
    monkeypatch.setenv("SLURM_CONF", str(suite.path / "no-slurm.conf"))
    result = suite.runpytest_subprocess("acceptance/test_nccl.py", "--cluster=tree", "--gpucluster-dry-run")
    assert result.ret == 0, result.stdout.str()
    result.stdout.fnmatch_lines(
        [
            "*gpucluster plan: * job(s), nothing submitted*",
            # (fnmatch reads [1-4] as a set of characters: ? stands for each bracket)
            "nodes: 4 from the profile's nodelist, their states unknown (gpu?1-4?): Slurm's word on them could not "
            "be read: `sinfo*",
            "  the plan takes each as usable; *",
            "fabric: 4 nodes under 2 leaves of 2 nodes (1 level of switches)",
        ]
    )

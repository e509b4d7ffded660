"""``--gpucluster-drain-failed``: after the run, the node a check rejected is drained in Slurm with the check
and its evidence as the reason, and no other node is touched; once repaired and resumed, a
re-test of that node beside an accepted partner merges with the first run into an accepted
handover (node3/node4; the ci profile's node1/node2 stay undisturbed)."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from faults_support import REPO, SLURM_CONF, fault_profile, restore_nodes, run_pytest, slurm_cmd

pytestmark = pytest.mark.integration

# A per-node check that finds a fault on node4 only: the evidence the drain reason must carry.
PLANTED = """
from pathlib import Path

def test_planted(judge, node):
    bad = node == "node4" and Path(__file__).with_name("fault").exists()
    judge.problems([f"{node}: planted fault for the drain test"] if bad else [], "planted")
"""


RETEST = "to re-test the nodes not accepted (once repaired) and merge the verdicts: "


def _option(argv: list[str], option: str) -> str:
    """The value ``argv`` gives ``option`` (``--option=value``)."""
    (value,) = [a.split("=", 1)[1] for a in argv if a.startswith(f"{option}=")]
    return value


def reason_of(node: str) -> str:
    out = slurm_cmd("sinfo", "-h", "-N", "-n", node, "-o", "%T|%E")
    return out.strip().splitlines()[0]


# Acceptance files run beside the planted check: a few, so each run takes seconds; what is drained
# and merged does not depend on which checks passed.
SUITE = ("test_slurm_health.py", "test_placement.py", "test_inventory.py")


def test_drain_failed_drains_exactly_the_rejected_node_with_its_evidence(slurm_cluster, tmp_path):
    profile = fault_profile(tmp_path)
    # A folder, not files named on the command line: the run is a whole acceptance of what the
    # folder holds, not a partial one, so the re-test's merge can accept the handover.
    site = tmp_path / "site"
    site.mkdir()
    for name in SUITE:
        shutil.copy(REPO / "tests" / "acceptance" / name, site / name)
    (site / "test_planted.py").write_text(PLANTED)
    (site / "fault").touch()
    whole = (str(site), "-m", "not slow")
    try:
        run = run_pytest(profile, tmp_path, *whole, "--gpucluster-drain-failed", timeout=300)
        node4, node3 = reason_of("node4"), reason_of("node3")
    finally:
        restore_nodes(slurm_cluster)
    assert run.returncode == 1, run.output[-3000:]
    assert run.results["acceptance"]["nodes"]["exclude"] == "node4"
    assert run.results["acceptance"]["nodes"]["summary"] == "1 of 2 nodes accepted; rejected: node4"
    state, reason = node4.split("|", 1)
    assert "drain" in state, node4
    assert reason.startswith("pytest-gpucluster: rejected: node4: planted fault for the drain test"), node4
    assert "drain" not in node3.split("|", 1)[0], node3
    assert run.results["drained"] == {"node4": {"reason": reason}}
    assert f"drained node4 (--gpucluster-drain-failed): reason {reason!r}" in run.output

    # Repaired (the fault is gone) and resumed by restore_nodes: the re-test the first run printed,
    # run as printed, tests what it did not accept (node4, read from its results file: no
    # --gpucluster-nodes) and merges; the first run's results file is kept as it was.
    (site / "fault").unlink()
    (said,) = [line.removeprefix(RETEST) for line in run.output.splitlines() if line.startswith(RETEST)]
    argv = shlex.split(said)
    assert run.path is not None and argv[0] == "pytest", said
    assert argv[-1] == f"--gpucluster-merge-results={run.path}", said
    kept = run.path.read_bytes()
    done = subprocess.run(
        [sys.executable, "-m", *argv],
        cwd=REPO,
        env={**os.environ, "SLURM_CONF": SLURM_CONF},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    output = done.stdout + done.stderr
    again = json.loads(Path(_option(argv, "--gpucluster-results")).read_text())
    merged = again["handover"]
    assert done.returncode == 0, output[-3000:]
    assert run.path.read_bytes() == kept
    assert merged["verdict"] == "ACCEPTED" and merged["retested"] == ["node4"], merged
    # node3 ran beside it as its accepted partner, so the checks across nodes judged node4 again
    assert merged["partners"] == ["node3"] and set(again["nodes"]) == {"node3", "node4"}, merged
    assert merged["nodes"]["node3"]["from"] == str(run.path) and merged["summary"] == "2 of 2 nodes accepted"
    assert "handover with " in output and ": ACCEPTED: 2 of 2 nodes accepted" in output

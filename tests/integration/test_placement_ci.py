"""Task placement against the real Slurm test cluster: all four layouts, two distinct hosts."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.integration


def test_placement_passes_on_two_namespaced_nodes(run_acceptance):
    run = run_acceptance("tests/acceptance/test_placement.py")
    assert run.returncode == 0, run.output
    assert run.outcome("2nodes-1task-each") == "passed"
    assert run.outcome("1node-2tasks") == "passed"
    assert run.outcome("every-node-a-task-per-gpu") == "passed"  # 2 nodes × 4 GRES GPUs
    assert run.results["nodes"] == ["node1", "node2"]
    assert all(len(t["job_ids"]) == 1 for t in run.results["tests"])


def test_local_profile_skips_the_two_node_layout_with_its_reason(run_acceptance):
    run = run_acceptance("tests/acceptance/test_placement.py", "--cluster=local")
    assert run.returncode == 0, run.output
    assert run.outcome("2nodes-1task-each") == "skipped"
    assert "profile 'local' has 1 node; this check needs 2" in run.output

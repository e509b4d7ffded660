"""srun's line for a node it could not start tasks on names that node, not the ones it cancelled
(a batch step's stderr recorded on the project's Slurm 22.05 test cluster, node4's slurmd dead)."""

from __future__ import annotations

from pathlib import Path

from pytest_gpucluster.launch.task_files import launch_failures

DATA = Path(__file__).resolve().parents[1] / "data" / "slurm"


def test_the_unreachable_node_is_named_with_sruns_reason():
    text = (DATA / "srun-22.05-launch-failed-node4.stderr.txt").read_text()
    found = launch_failures(text)
    assert list(found) == ["node4"]
    assert "Communication connection failure" in found["node4"] and "29.0" in found["node4"]


def test_a_task_that_srun_cancelled_or_a_plain_failure_names_no_node():
    text = (DATA / "srun-22.05-launch-failed-node4.stderr.txt").read_text()
    kept = "\n".join(line for line in text.splitlines() if "Task launch" not in line)
    assert launch_failures(kept) == {}
    assert launch_failures("srun: error: node2: task 1: Exited with exit code 1\n") == {}

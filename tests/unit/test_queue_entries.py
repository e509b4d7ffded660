"""One squeue for many jobs: its answer parsed into each job's state and reason, and shared by
every job a launcher's watcher waits on.

``squeue-22.05-jobs-state-reason.txt`` was captured on the project's test cluster (slurm-wlm
22.05.8): three jobs of every node, exclusive, submitted together, then ``squeue -h -j
1,2,3,999999 -o "%i|%T|%r"``; squeue leaves the unknown id out.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from pytest_gpucluster import slurm
from pytest_gpucluster.errors import SlurmQueryError

RECORDED = Path(__file__).parents[1] / "data" / "slurm" / "squeue-22.05-jobs-state-reason.txt"


class Answering(slurm.Slurm):
    """A run's client of Slurm whose commands ``answer`` gives the output of (the recording)."""

    def __init__(self, answer: Callable[[list[str]], str]) -> None:
        super().__init__()
        self.answer = answer

    def run(self, argv: list[str], timeout_s: float = slurm.TIMEOUT_S) -> str:
        return self.answer(argv)


def test_each_listed_job_has_its_state_and_reason_and_one_call_serves_all(monkeypatch):
    calls = []

    def recorded(argv, *args, **kwargs):
        calls.append(argv)
        return RECORDED.read_text()

    entries = slurm.queue_entries(Answering(recorded), ["3", "1", "2", "999999", "2"])
    assert entries == {"1": ("RUNNING", "None"), "2": ("PENDING", "Resources"), "3": ("PENDING", "Priority")}
    assert calls == [["squeue", "-h", "-j", "1,2,3,999999", "-o", "%i|%T|%r"]]


def test_a_single_id_the_queue_no_longer_knows_is_an_empty_answer(monkeypatch):
    # squeue refuses a list of one unknown id (captured: "slurm_load_jobs error: Invalid job id
    # specified", exit status 1), where it leaves one out of a list of several.
    def refused(argv, *args, **kwargs):
        raise SlurmQueryError(f"`{' '.join(argv)}` exited 1: slurm_load_jobs error: Invalid job id specified")

    assert slurm.queue_entries(Answering(refused), ["999999"]) == {}
    assert slurm.queue_entries(Answering(refused), []) == {}


def test_any_other_failure_is_raised(monkeypatch):
    def down(argv, *args, **kwargs):
        raise SlurmQueryError("`squeue -h ...` did not answer within 30 s.")

    with pytest.raises(SlurmQueryError, match="did not answer"):
        slurm.queue_entries(Answering(down), ["1", "2"])


class _Waited:
    """A job as the watcher knows it: its id."""

    def __init__(self, job_id: str) -> None:
        self.job_id = job_id


def test_the_watcher_answers_every_waiter_from_one_squeue(monkeypatch):
    from pytest_gpucluster.launch import watcher as watcher_module
    from pytest_gpucluster.launch.watcher import SlurmWatcher

    calls = []

    def recorded(argv, *args, **kwargs):
        calls.append(argv)
        return RECORDED.read_text()

    watcher = SlurmWatcher(client=Answering(recorded))
    for job_id in ("1", "2", "3"):
        watcher.watch(_Waited(job_id))
    assert watcher.queue_state("1") == "RUNNING"
    assert watcher.pending_reason("2") == "Resources"
    assert watcher.entries(["3", "2"]) == {"3": ("PENDING", "Priority"), "2": ("PENDING", "Resources")}
    assert calls == [["squeue", "-h", "-j", "1,2,3", "-o", "%i|%T|%r"]]
    # A job the launcher no longer waits on leaves the next read.
    watcher.unwatch("3")
    monkeypatch.setattr(watcher_module, "QUEUE_READ_S", 0.0)  # the shared read has aged
    watcher.entries()
    assert calls[-1] == ["squeue", "-h", "-j", "1,2", "-o", "%i|%T|%r"]


def test_a_lost_node_is_learned_once_with_its_first_evidence():
    from pytest_gpucluster.launch.watcher import SlurmWatcher

    watcher = SlurmWatcher()
    watcher.lost.learn({"node4": "DOWN"}, job_id="7", how="under job 7 (probe), RUNNING")
    watcher.lost.learn({"node4": "silent", "node3": "DRAIN"}, job_id="9", how="under job 9 (nccl), FAILED")
    assert watcher.lost.nodes == {"node4": "DOWN", "node3": "DRAIN"}
    assert watcher.lost.seen["node4"]["job"] == "7" and watcher.lost.seen["node3"]["job"] == "9"

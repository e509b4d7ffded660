"""Whose fault it is (``faults.py``): a fault outside the nodes is told apart from a node's, other
work in the queue from the run's own jobs, and of two groups of jobs that must run at once and
hold half of each other's nodes, exactly one gives way."""

from __future__ import annotations

from pytest_gpucluster.errors import (
    DaemonUnreachable,
    LaunchError,
    NodeLostError,
    QueueHeldError,
    QueueTimeoutError,
    SharedFsFault,
)
from pytest_gpucluster.faults import cluster_fault, gives_way, held_sentence, other_work, srun_missed_controller
from pytest_gpucluster.slurm import Holder

NODES = ("node1", "node2")


def test_faults_outside_the_nodes_are_told_from_a_nodes_own():
    down = DaemonUnreachable("slurmctld", 61.0, "`sbatch` exited 1: Unable to contact slurm controller")
    assert cluster_fault(down) is down
    assert cluster_fault(SharedFsFault("shared_fs '/mnt/x' cannot be written")) is not None
    assert cluster_fault(QueueHeldError("job 7 (r-x): still PENDING after 60 s")) is not None
    wrapped = RuntimeError("while reading the node probe")
    wrapped.__cause__ = down
    assert cluster_fault(wrapped) is down
    for own in (
        LaunchError("job 7 (r-x) on node2: ended FAILED with 1 failed task(s)"),
        NodeLostError("job 7 (r-x): lost its node(s)", lost={"node2": "DOWN"}),
        QueueTimeoutError("job 7 (r-x): still PENDING after 60 s: ReqNodeNotAvail"),
        AssertionError("node2: 3 GPUs, expected 4"),
    ):
        assert cluster_fault(own) is None, own


def test_other_work_is_what_is_not_this_runs_own():
    holders = [
        Holder("10", "gpucluster-aa11-sharedfs", "RUNNING", NODES, "root"),
        Holder("11", "gpucluster-bb22-isolation-pair", "RUNNING", NODES, "root"),  # another run
        Holder("12", "train-llm", "RUNNING", ("node1",), "alice"),
    ]
    assert [h.job_id for h in other_work(holders, "gpucluster-aa11-")] == ["11", "12"]
    assert held_sentence(other_work(holders, "gpucluster-aa11-")[1:], NODES, 60) == (
        "other work held node1, node2 past queue_timeout_s (60 s): job 12 of alice (train-llm), RUNNING on node1"
    )


def test_of_two_pairs_holding_half_of_each_others_nodes_exactly_one_gives_way():
    # Run X submitted 10 and 12, run Y 11 and 13; 10 and 11 run, 12 and 13 wait.
    x, y = ("10", "12"), ("11", "13")
    on_nodes = [Holder("10", "gpucluster-x-isolation-pair", "RUNNING", NODES, "root")]
    on_nodes.append(Holder("11", "gpucluster-y-isolation-pair", "RUNNING", NODES, "root"))
    gave = {name: gives_way(group, on_nodes) for name, group in (("x", x), ("y", y))}
    assert gave["x"] is not None and gave["x"].job_id == "11"  # 11 came after 10: x gives way
    assert gave["y"] is None  # 10 came before 11: y waits for x's job to go


def test_a_holder_older_than_the_group_is_waited_for():
    busy = [Holder("3", "train-llm", "RUNNING", NODES, "alice")]
    assert gives_way(("10", "11"), busy) is None


def test_srun_that_could_not_reach_the_controller_is_told_from_a_dead_node():
    # The lines as srun writes them to a batch step's stderr on the test cluster: slurmctld
    # stopped as the job began; node4's slurmd killed before the job.
    missed = (
        "srun: error: Unable to confirm allocation for job 52: Unable to contact slurm controller (connect failure)\n"
        "srun: Check SLURM_JOB_ID environment variable. Expired or invalid job 52\n"
    )
    assert srun_missed_controller(missed).startswith("srun: error: Unable to confirm allocation for job 52")
    for dead in (
        "srun: error: Task launch for StepId=29.0 failed on node node4: Communication connection failure",
        "srun: error: Application launch failed: Communication connection failure",
    ):
        assert srun_missed_controller(dead + "\n") == "", dead
    assert srun_missed_controller("Traceback (most recent call last):\nValueError: x\n") == ""

"""Whose fault it is (``faults.py``): a fault outside the nodes is told apart from a node's, other
work in the queue from the run's own jobs, and of two groups of jobs that must run at once and
hold half of each other's nodes, exactly one gives way."""

from __future__ import annotations

from pytest_gpucluster.errors import (
    DaemonUnreachable,
    LaunchError,
    NodeLostError,
    NodesHeld,
    QueueHeldError,
    QueueTimeoutError,
    SharedFsFault,
)
from pytest_gpucluster.launch.faults import (
    cluster_fault,
    error_findings,
    foreign_work,
    gives_way,
    group_of,
    held_sentence,
    other_work,
    srun_missed_controller,
)
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


def test_only_foreign_work_is_learned_as_holding_a_node():
    holders = [
        Holder("11", "gpucluster-bb22-isolation-pair", "RUNNING", NODES, "root"),  # another run: takes turns
        Holder("12", "train-llm", "RUNNING", ("node1",), "alice"),
    ]
    assert [h.job_id for h in foreign_work(holders)] == ["12"]


def test_an_errors_fields_say_whose_fault_it_is():
    held = NodesHeld("other work held node2 past queue_timeout_s (45 s): job 13 of bob", {"node2": "job 13 of bob"})
    (f,) = error_findings(held, node="node1", tested=NODES)
    # not judged: the held node and the check's own node, neither convicted
    assert (f.scope, f.severity, f.nodes, f.convicts) == ("queue", "not_judged", ("node2", "node1"), ())
    lost = NodeLostError("job 7 (r-x): lost its node(s)", lost={"node2": "DOWN"})
    assert [(f.scope, f.convicts) for f in error_findings(lost, node="", tested=NODES)] == [("node", ("node2",))]
    some = LaunchError("job 8: task 1 on node2 failed", nodes=NODES, culprits=("node2",))
    assert error_findings(some, node="node1", tested=NODES)[0].convicts == ("node2",)
    every = LaunchError("job 9: every task failed", nodes=NODES, culprits=NODES)
    assert error_findings(every, node="", tested=NODES)[0].convicts == ()  # a cause common to all
    alone = LaunchError("job 10: task 0 on node1 failed", nodes=("node1",), culprits=("node1",))
    assert error_findings(alone, node="", tested=NODES)[0].convicts == ("node1",)
    # a job ended for a node the run lost under it (found silent in a job beside it): that node's
    # fault, though both tasks failed (the healthy one by the cancel that followed)
    (ended,) = error_findings(every, node="", tested=NODES, lost={"node2": "silent"})
    assert (ended.culprits, ended.convicts) == (("node2",), ("node2",))
    assert error_findings(every, node="", tested=NODES, lost={"node1": "x", "node2": "y"})[0].convicts == ()
    assert error_findings(AssertionError("3 GPUs"), node="node2", tested=NODES)[0].convicts == ("node2",)
    assert error_findings(AssertionError("x"), node="", tested=NODES)[0].convicts == ()


def _pair(run, mark, a, b, state_a="RUNNING", state_b="PENDING"):
    return [
        Holder(a, f"gpucluster-{run}-isolation-pair@{mark}", state_a, NODES, "root"),
        Holder(b, f"gpucluster-{run}-isolation-pair-per-task@{mark}", state_b, NODES, "root"),
    ]


def _split(jobs, group):
    """What the group sees: the others' jobs running on its nodes and queued for them."""
    others = [h for h in jobs if h.job_id not in group]
    return [h for h in others if h.state != "PENDING"], [h for h in others if h.state == "PENDING"]


def test_of_two_pairs_holding_half_of_each_others_nodes_exactly_one_gives_way():
    # Two runs (or two xdist workers of one run: the marks differ) submitted 10, 11, 12, 13 in
    # that order: both first jobs run, holding half of every node; both second jobs wait.
    for x_run, y_run in (("aa11", "bb22"), ("aa11", "aa11")):
        jobs = _pair(x_run, "f00d01", "10", "12") + _pair(y_run, "f00d02", "11", "13")
        x = gives_way(("10", "12"), ("12",), *_split(jobs, {"10", "12"}))
        y = gives_way(("11", "13"), ("13",), *_split(jobs, {"11", "13"}))
        assert x is not None and x.job_id == "11"  # y's first job came after x's: x gives way
        assert y is None  # x's jobs came first: y waits, and starts once x's are cancelled


def test_a_pair_gives_way_to_a_job_queued_ahead_of_its_second_half():
    # Measured under -n 4: a worker's node probe (all GPUs) queued between a pair's two jobs;
    # Slurm starts it first, and it needs the half the pair's first job holds.
    probe = Holder("110", "gpucluster-aa11-node-probe", "PENDING", NODES, "root")
    beside = Holder("109", "gpucluster-aa11-ceilings", "RUNNING", NODES, "root")
    gave = gives_way(("108", "112"), ("112",), [beside], [probe])
    assert gave is probe
    assert gave.describe() == "job 110 of root (gpucluster-aa11-node-probe), PENDING for node1, node2"


def test_a_job_that_ran_before_the_pair_began_is_waited_for():
    busy = [Holder("3", "train-llm", "RUNNING", NODES, "alice")]
    assert gives_way(("10", "11"), ("11",), busy, []) is None
    queued_later = [Holder("15", "train-llm", "PENDING", NODES, "alice")]  # behind the pair: no matter
    assert gives_way(("10", "11"), ("11",), busy, queued_later) is None


def test_group_marks_are_read_from_job_names_only_where_one_is_written():
    assert group_of("gpucluster-aa11-isolation-pair@3f9a2c") == "3f9a2c"
    assert group_of("gpucluster-aa11-node-probe") == ""
    assert group_of("backup@nightly") == "nightly"  # a foreign name may look like one: it only orders
    assert group_of("@") == ""


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

"""The rules of a bounded job wait (``launch.wait_rules``): Slurm's states, reasons and node
states in, a decision or the error to raise out. No Slurm: plain values, and the recorded
``sinfo --json`` of the test cluster with node2 drained (Slurm 22.05)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_gpucluster import slurm
from pytest_gpucluster.errors import (
    ClusterFault,
    LaunchError,
    NodeLostError,
    QueueAfterOutageError,
    QueueHeldError,
    QueueTimeoutError,
    WallTimeoutError,
)
from pytest_gpucluster.launch import wait_rules as rules
from pytest_gpucluster.slurm import Holder

DRAINED = Path(__file__).parents[1] / "data" / "slurm" / "sinfo-22.05-node2-drained.json"


@pytest.mark.parametrize(
    ("state", "waiting", "ended", "ran"),
    [
        ("PENDING", True, False, False),
        ("CONFIGURING", True, False, False),
        ("RUNNING", False, False, True),
        ("COMPLETING", False, False, True),
        ("COMPLETED", False, True, False),
        ("CANCELLED BY 0", False, True, False),
        ("NODE_FAIL", False, True, False),
        ("GONE", False, True, False),
    ],
)
def test_a_state_is_waiting_ended_or_past_the_queue(state, waiting, ended, ran):
    assert (rules.is_waiting(state), rules.has_ended(state), rules.has_run(state)) == (waiting, ended, ran)


def test_the_state_is_asked_for_often_at_first_and_near_the_end():
    assert rules.state_every(since_submit_s=1.0, some_results=False) == rules.QUICK_STATE_S
    assert rules.state_every(since_submit_s=60.0, some_results=False) == rules.SACCT_EVERY_S
    assert rules.state_every(since_submit_s=60.0, some_results=True) == rules.ENDING_CHECK_S


def test_a_reason_no_wait_cures_ends_the_wait_once_it_stood_for_a_moment():
    since = rules.never_starts_since("PartitionTimeLimit", None, now=100.0)
    assert since == 100.0
    assert not rules.never_starts_confirmed(since, now=101.0)
    since = rules.never_starts_since("PartitionTimeLimit", since, now=102.5)
    assert since == 100.0 and rules.never_starts_confirmed(since, now=102.5)
    # A reason waiting may cure starts the count again.
    assert rules.never_starts_since("Resources", since, now=103.0) is None
    assert not rules.never_starts_confirmed(None, now=200.0)


def test_a_job_slurm_will_never_start_is_named_with_the_reason_and_what_it_asked():
    over = rules.never_starts("PENDING", "PartitionTimeLimit", 300.0, 90, shape_hint="ignored")
    assert over.error is LaunchError
    assert over.message == (
        "Slurm will not start it: PENDING, reason PartitionTimeLimit (the job's time limit is above the "
        "partition's); the job asked for 90 min; cancelled at once rather than waiting queue_timeout_s (300 s). "
        "Check the profile against the partition (sinfo, scontrol show partition)."
    )
    assert rules.needs_shape_hint("BadConstraints") and not rules.needs_shape_hint("InvalidQOS")
    shaped = rules.never_starts("PENDING", "BadConstraints", 60.0, 10, shape_hint="; in partition debug: node1 ...")
    assert "(no node satisfies the job's constraints); in partition debug: node1 ...; cancelled" in shaped.message


def test_the_nodes_slurm_will_not_start_a_job_on_come_from_its_node_list():
    found = slurm.parse_nodes(json.loads(DRAINED.read_text()))
    assert rules.unusable(found, ("node1", "node2", "node9")) == {
        "node2": "IDLE+DRAIN (integration test)",
        "node9": "not known to slurmctld",
    }


def test_a_job_pinned_to_an_unusable_node_is_given_up_but_one_that_only_registers_waits():
    bad = rules.pinned_unusable("PENDING", "ReqNodeNotAvail", {"node2": "IDLE+DRAIN (integration test)"})
    assert bad is not None and bad.error is NodeLostError
    assert bad.message == (
        "cannot start while PENDING (Slurm's reason: ReqNodeNotAvail): node2 is IDLE+DRAIN (integration test); "
        "cancelled at once rather than waiting queue_timeout_s."
    )
    assert bad.lost == {"node2": "IDLE+DRAIN (integration test)"}
    assert rules.pinned_unusable("PENDING", "", {"node3": "UNKNOWN (Not responding)"}) is None
    assert rules.pinned_unusable("PENDING", "", {}) is None


def test_a_job_behind_only_jobs_slurm_is_ending_on_a_lost_node_is_excused():
    ending = Holder("12", "gpucluster-r-probe", "COMPLETING", ("node3", "node4"))
    running = Holder("13", "train", "RUNNING", ("node3",))
    lost = {"node4": "DOWN+NOT_RESPONDING"}
    assert rules.ending_on_lost([ending], lost) == "job 12 (gpucluster-r-probe) on node4"
    assert rules.ending_on_lost([ending, running], lost) == ""  # another job holds the node too
    assert rules.ending_on_lost([ending], {}) == ""
    assert rules.excused_s(5.0, 2.0, behind_lost=True, queue_limit_s=60.0) == 7.0
    assert rules.excused_s(59.0, 2.0, behind_lost=True, queue_limit_s=60.0) == 60.0
    assert rules.excused_s(5.0, 2.0, behind_lost=False, queue_limit_s=60.0) == 5.0


def test_just_after_a_controller_outage_a_queue_timeout_is_the_controllers_unless_other_work_holds_the_nodes():
    assert rules.after_outage(0.0) and rules.after_outage(rules.AFTER_OUTAGE_S)  # out now / came back
    assert not rules.after_outage(None) and not rules.after_outage(rules.AFTER_OUTAGE_S + 1)
    held = "node3 held by job 45 (gpucluster-r-placement), COMPLETING on node3"
    said = "the Slurm controller (slurmctld) stopped answering at 10:14:05 UTC (x)"
    timeout = rules.queue_timeout("PENDING", 20.0, 20.0, "Resources", held, other=False, controller_sentence=said)
    assert timeout.error is QueueAfterOutageError and timeout.fault_sentence == said
    assert issubclass(QueueAfterOutageError, ClusterFault) and QueueAfterOutageError.what == "slurmctld"
    assert timeout.message.startswith(
        "still PENDING after 20 s (and 20 s more not counted: it waited on Slurm, not on its nodes)"
    )
    theirs = rules.queue_timeout("PENDING", 20.0, 0.0, "", "", other=True, fault_sentence="other work held node3")
    assert theirs.error is QueueHeldError  # other work is named as what it is, outage or not
    # Waiting then is excused, up to one more queue_timeout_s, as behind a lost node's job.
    assert rules.excused_s(19.0, 2.0, behind_lost=True, queue_limit_s=20.0) == 20.0


def test_queue_time_leaves_out_what_was_excused_and_the_controllers_outage():
    assert rules.queue_time_counted(100.0, excused=20.0, outage_s=30.0) == 50.0
    assert rules.controller_gone(61.0, window_s=60.0) and not rules.controller_gone(None, 60.0)
    assert not rules.controller_gone(10.0, window_s=60.0)


def test_a_queue_timeout_names_what_holds_the_nodes_and_other_work_makes_it_a_held_queue():
    mine = Holder("23", "gpucluster-r-sharedfs", "RUNNING", ("node3", "node4"))
    held = rules.held_clause(("node3",), [mine], {"node4": "DOWN+NOT_RESPONDING", "node3": "DOWN"})
    assert held == (
        "node3 held by job 23 (gpucluster-r-sharedfs), RUNNING on node3, node4; node4 is DOWN+NOT_RESPONDING "
        "(earlier jobs of this run ran there; Slurm may still be ending one)"
    )
    timeout = rules.queue_timeout("PENDING", 60.0, 0.0, "Resources", held, other=False, fault_sentence="x")
    assert timeout.error is QueueTimeoutError and timeout.fault_sentence == ""
    assert timeout.message.startswith("still PENDING after 60 s: Resources (node3 held by job 23 ")
    assert timeout.message.endswith("; cancelled. Check the partition's nodes (sinfo) or raise queue_timeout_s.")
    other = rules.queue_timeout("PENDING", 60.0, 30.0, "", "", other=True, fault_sentence="other work held node3")
    assert other.error is QueueHeldError and other.fault_sentence == "other work held node3"
    assert other.message.startswith(
        "still PENDING after 60 s (and 30 s more not counted: it waited on Slurm, not on its nodes): "
        "reason unknown; cancelled."
    )


def test_only_the_controllers_word_makes_a_requeue():
    assert rules.requeued("PENDING", "REQUEUED")
    assert not rules.requeued("PENDING", "RUNNING")  # accounting lags the controller
    assert not rules.requeued("PENDING", None)
    requeued = rules.nodes_lost("PENDING", {}, was_requeued=True)
    assert requeued.error is NodeLostError
    assert requeued.message == (
        "was put back in the queue (PENDING) after it had started; cancelled. Check slurmd there (scontrol show node)."
    )


def test_a_job_past_its_limit_and_slurms_grace_is_given_up():
    assert rules.over_time_limit("RUNNING", 10 * 60 + rules.GRACE_S, 10) is None
    over = rules.over_time_limit("RUNNING", 10 * 60 + rules.GRACE_S + 1, 10)
    assert over is not None and over.error is WallTimeoutError
    assert (
        over.message
        == "still RUNNING 691 s after it started, past its 10 min limit; cancelled (a hung or suspended job)."
    )


def test_a_node_down_ends_the_run_at_once_and_one_not_responding_after_a_grace():
    down = {"node4": "DOWN+NOT_RESPONDING (Not responding)"}
    since = rules.not_responding_since(down, {}, now=10.0)
    assert rules.lost_while_running(down, since, now=10.0)
    quiet = {"node4": "ALLOCATED+NOT_RESPONDING"}
    since = rules.not_responding_since(quiet, {}, now=10.0)
    assert not rules.lost_while_running(quiet, since, now=15.0)
    since = rules.not_responding_since(quiet, since, now=21.0)
    assert since == {"node4": 10.0} and rules.lost_while_running(quiet, since, now=21.0)
    assert rules.not_responding_since({}, since, now=22.0) == {}  # it answered again
    assert rules.lost_while_running({"node9": "not known to slurmctld"}, {}, now=0.0)
    lost = rules.nodes_lost("RUNNING", down)
    assert lost.message == (
        "lost its node(s) while RUNNING: node4 is DOWN+NOT_RESPONDING (Not responding); cancelled. "
        "Check slurmd there (scontrol show node)."
    )


def test_a_task_that_failed_long_ago_ends_a_job_whose_others_still_run():
    assert rules.task_failed_long_ago(first_failure=0.0, now=21.0, grace_s=20.0, checked=1, tasks=2)
    assert not rules.task_failed_long_ago(first_failure=0.0, now=19.0, grace_s=20.0, checked=1, tasks=2)
    assert not rules.task_failed_long_ago(first_failure=0.0, now=21.0, grace_s=20.0, checked=2, tasks=2)
    assert not rules.task_failed_long_ago(first_failure=None, now=21.0, grace_s=20.0, checked=1, tasks=2)
    assert not rules.task_failed_long_ago(first_failure=0.0, now=21.0, grace_s=20.0, checked=0, tasks=1)


def test_results_are_waited_for_longer_after_a_completed_job():
    assert rules.result_lag_s("COMPLETED", None) == rules.RESULT_LAG_S
    assert rules.result_lag_s("CANCELLED", None) == rules.RESULT_LAG_FAILED_S
    assert rules.result_lag_s("COMPLETED", 0.0) == 0.0


def test_a_node_none_of_whose_tasks_wrote_a_result_is_silent_when_another_nodes_did():
    failed = [(2, "no result"), (3, "no result"), (1, "RuntimeError: boom")]
    where = ["node4", "node4", "node3"]
    assert rules.silent_nodes(failed, where, {"node3.cluster"}, "41", "FAILED") == {
        "node4": "silent: no task of it wrote a result in job 41 (FAILED) while other nodes' did"
    }
    assert rules.silent_nodes(failed, where, set(), "41", "FAILED") == {}  # no node answered: not the node's fault
    # Not even a log file in the job's folder (on the shared filesystem): the node does not see it.
    (said,) = rules.silent_nodes(failed, where, {"node3"}, "41", "FAILED", no_files={"node4"}).values()
    assert said.startswith("silent: none of its tasks wrote even a log file into job 41's folder on the shared")


def test_a_failed_job_ran_on_its_pin_where_slurm_lists_part_or_none_of_it_after_a_task_answered():
    pin = ("node3", "node4")
    assert rules.ran_on(("node3", "node4"), pin, 2) == pin
    assert rules.ran_on(("node4",), pin, 2) == pin  # accounting holds part of the allocation
    # Slurm lists none of it (the record not yet in accounting) while node3's task answered: it ran.
    assert rules.ran_on((), pin, 2, answered=True) == pin
    assert rules.ran_on((), pin, 2) == ()  # nothing answered: it never ran, as Slurm says
    assert rules.ran_on((), ("node3",), 2, answered=True) == ()  # a pin that is not the whole job
    assert rules.ran_on(("node5",), pin, 2) == ("node5",)  # not part of the pin: Slurm's word stands


def test_a_job_that_never_ran_is_told_by_slurms_record_else_by_what_was_seen():
    record = {"JobState": "CANCELLED", "Reason": "ReqNodeNotAvail"}
    assert rules.never_started(False, record, "", "") == "Slurm says CANCELLED, reason ReqNodeNotAvail"
    assert rules.never_started(False, {}, "GONE", "Priority") == "Slurm says GONE, reason Priority"
    assert rules.never_started(False, {}, "", "") == "Slurm says ended"
    assert rules.never_started(False, {"JobState": "CANCELLED", "Reason": "Dependency"}, "", "Priority") == (
        "Slurm says CANCELLED, reason Dependency; it waited for: Priority"
    )
    assert rules.never_started(True, record, "", "") is None


def test_past_the_queue_bound_a_job_waits_on_behind_its_own_runs_jobs_only():
    own = Holder("4", "gpucluster-r1-sharedfs", "RUNNING", ("node1", "node2"))
    other_run = Holder("9", "gpucluster-r2-placement", "RUNNING", ("node1",))
    bob = Holder("7", "bobs-training", "RUNNING", ("node1",), "bob")
    assert rules.behind_own_run(30.0, 5, [own], "gpucluster-r1-")
    assert not rules.behind_own_run(30.0, 5, [own, bob], "gpucluster-r1-")  # other work: named, as ever
    assert not rules.behind_own_run(30.0, 5, [other_run], "gpucluster-r1-")
    assert not rules.behind_own_run(301.0, 5, [own], "gpucluster-r1-")  # bounded: one more of its limit
    assert not rules.behind_own_run(30.0, 5, [], "gpucluster-r1-")  # nothing holds it: Slurm's reason stands

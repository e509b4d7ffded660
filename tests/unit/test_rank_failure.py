"""Teardown time from rank stamp files, for each way survivors can stop (files as the workload
writes them)."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

import pytest

from pytest_gpucluster.checks import rank_failure as rf_checks
from pytest_gpucluster.workloads import rank_failure as rf

T = 1763726400.0


def _stamp(
    folder: Path,
    rank: int,
    node: str,
    events: dict[str, float],
    heartbeat: float | None = None,
    world: int = 2,
    **extra,
) -> None:
    data = {
        "rank": rank,
        "world_size": world,
        "node": node,
        "events": {k: T + v for k, v in events.items()},
        "heartbeat": None if heartbeat is None else T + heartbeat,
        **extra,
    }
    (folder / f"rank{rank}.json").write_text(json.dumps(data))


def test_survivor_that_noticed_through_the_collective(tmp_path):
    events = {"joined": 0, "after_barrier": 0.1, "entered_collective": 0.1, "noticed": 1.15, "done": 1.2}
    _stamp(tmp_path, 0, "node1", events, heartbeat=1.1, error="RuntimeError: Connection closed by peer")
    _stamp(tmp_path, 1, "node2", {"joined": 0, "after_barrier": 0.1, "victim_exit": 1.1}, heartbeat=1.0)
    td = rf_checks.teardown_from_stamps(tmp_path)
    assert td.problems == ()
    assert td.seconds == pytest.approx(0.1)
    assert td.where == "node1"
    m = td.measurement("41")
    # the cluster's setup is measured: the job's nodes together, the slowest one named in the detail
    assert (m.metric, m.nodes, m.culprits, m.job_id) == (
        "robustness.rank_failure_teardown",
        ("node1", "node2"),
        (),
        "41",
    )
    assert td.detail == (
        "rank 1 on node2 exited with 17; rank 0 on node1: stopped 0.1 s after the victim's exit, "
        "noticed (RuntimeError: Connection closed by peer)"
    )


def test_the_jobs_run_time_spans_first_start_to_last_stop(tmp_path):
    events = {"joined": 0.5, "after_barrier": 0.6, "entered_collective": 0.6, "noticed": 1.15, "done": 1.2}
    _stamp(tmp_path, 0, "node1", events, heartbeat=1.1, started=T - 2.0, process_started=T - 2.4)
    _stamp(
        tmp_path,
        1,
        "node2",
        {"joined": 0.5, "victim_exit": 1.1},
        heartbeat=1.0,
        started=T - 1.5,
        process_started=T - 2.6,
    )
    td = rf_checks.teardown_from_stamps(tmp_path)
    # The end is the latest sign of life: rank 0's last heartbeat (1.1 s) plus one heartbeat.
    assert (td.ran_from, td.ran_to) == (pytest.approx(T - 2.0), pytest.approx(T + 1.1 + rf.HEARTBEAT_S))
    assert td.process_from == pytest.approx(T - 2.6)  # the first process to start, for the time split


def test_stamps_written_by_the_workload_carry_its_start_and_process_start(tmp_path):
    from pytest_gpucluster.workloads.context import local_context, process_start_time

    before = time.time()
    stamps = rf._Stamps(tmp_path, local_context())
    stamps.event("joined")
    data = json.loads((tmp_path / "rank0.json").read_text())
    assert before <= data["started"] <= time.time()
    assert 0 < data["process_started"] <= before
    assert data["process_started"] == pytest.approx(process_start_time(), abs=0.05)


def test_survivor_killed_by_the_scheduler_counts_to_one_heartbeat_after_its_last(tmp_path):
    _stamp(tmp_path, 0, "node1", {"joined": 0, "after_barrier": 0.1, "entered_collective": 0.1}, heartbeat=1.3)
    _stamp(tmp_path, 1, "node2", {"after_barrier": 0.1, "victim_exit": 1.1}, heartbeat=1.0)
    td = rf_checks.teardown_from_stamps(tmp_path)
    assert td.seconds == pytest.approx(0.2 + rf.HEARTBEAT_S)
    assert "ended without a Python exception (killed by the scheduler" in td.survivors[0]


def test_nccl_watchdog_timeout_is_the_worst_survivor(tmp_path):
    _stamp(
        tmp_path,
        0,
        "node1",
        {"entered_collective": 0.1, "noticed": 31.0, "done": 31.5},
        world=3,
        error="DistBackendError: Watchdog caught collective operation timeout",
    )
    _stamp(tmp_path, 1, "node1", {"entered_collective": 0.1}, heartbeat=45.0, world=3)
    _stamp(tmp_path, 2, "node2", {"victim_exit": 1.0}, heartbeat=0.9, world=3)
    td = rf_checks.teardown_from_stamps(tmp_path)
    assert td.seconds == pytest.approx(44.0 + rf.HEARTBEAT_S)
    assert td.where == "node1"
    assert len(td.survivors) == 2


def test_fault_never_injected(tmp_path):
    _stamp(tmp_path, 0, "node1", {"joined": 0})
    td = rf_checks.teardown_from_stamps(tmp_path)
    assert math.isnan(td.seconds)
    (found,) = td.problems
    assert found.text == (
        "no rank reached the point of failure (victim_exit); the job failed before the fault "
        "could be injected. Stamps: rank 0 on node1: joined"
    )
    assert (found.scope, found.nodes, found.culprits) == ("nodes", ("node1",), ())


def test_a_node_of_the_job_that_wrote_no_stamp_is_named_with_the_others(tmp_path):
    # node2's ranks could not write to the shared filesystem: the job ran on both nodes all the same
    _stamp(tmp_path, 0, "node1", {})
    td = rf_checks.teardown_from_stamps(tmp_path, ran_on=("node1", "node2"))
    (found,) = td.problems
    assert (found.scope, found.nodes, found.culprits) == ("nodes", ("node1", "node2"), ())
    assert found.text.endswith("Stamps: rank 0 on node1: no event")


def test_impossible_collective_and_missing_ranks_are_problems(tmp_path):
    _stamp(tmp_path, 0, "node1", {"collective_returned": 1.2, "done": 1.3}, world=3)
    _stamp(tmp_path, 2, "node2", {"victim_exit": 1.0}, world=3)
    td = rf_checks.teardown_from_stamps(tmp_path)
    # the rank that misbehaved is its node's; the missing stamps are the job's nodes' together
    assert [(f.text, f.nodes, f.culprits) for f in td.problems] == [
        ("rank 0 on node1: all_reduce completed although rank 2 was dead", ("node1", "node2"), ("node1",)),
        (f"only 2 of 3 ranks wrote stamps to {tmp_path}", ("node1", "node2"), ()),
    ]


def test_job_shape_and_time_limit():
    assert rf_checks.job_shape(2) == (2, 1)
    assert rf_checks.job_shape(16) == (2, 1)
    assert rf_checks.job_shape(1) == (1, 2)
    assert rf_checks.job_minutes(120) == 4  # 120 s bound + 30 s collective timeout + 60 s start-up
    assert rf_checks.job_minutes(0) == 2


def test_the_backend_of_the_ranks_is_in_the_detail(tmp_path):
    _stamp(
        tmp_path,
        0,
        "node1",
        {"entered_collective": 0.1, "noticed": 1.2, "done": 1.3},
        backend="gloo",
        error="RuntimeError: Connection closed by peer",
    )
    _stamp(tmp_path, 1, "node1", {"victim_exit": 1.1}, heartbeat=1.0, backend="gloo")
    assert rf_checks.teardown_from_stamps(tmp_path).detail.startswith("rank 1 on node1 exited with 17 (gloo ranks); ")


def test_a_job_that_never_started_says_so_with_slurms_reason_and_its_nodes():
    found = rf_checks.never_started("41", "Slurm says CANCELLED, reason ReqNodeNotAvail", ("node1", "node2"))
    assert found.text == (
        "job 41 never started (Slurm says CANCELLED, reason ReqNodeNotAvail); it was to run on node1, node2, so no "
        "rank failed and no teardown was measured"
    )
    assert (found.scope, found.nodes, found.culprits) == ("nodes", ("node1", "node2"), ())
    assert "it was to run on any node of the partition" in rf_checks.never_started("7", "Slurm says CANCELLED", ()).text


def test_the_launcher_tells_a_job_that_never_started():
    from pytest_gpucluster.launch.wait_rules import never_started

    record = {"JobState": "CANCELLED", "Reason": "ReqNodeNotAvail,_UnavailableNodes:node2", "NodeList": "(null)"}
    assert never_started(False, record, "CANCELLED", "") == (
        "Slurm says CANCELLED, reason ReqNodeNotAvail,_UnavailableNodes:node2"
    )
    # The controller forgot the job, or says no reason: the reason last seen in the queue stands in.
    assert never_started(False, {}, "CANCELLED", "Resources") == "Slurm says CANCELLED, reason Resources"
    assert (
        never_started(False, {"JobState": "CANCELLED", "Reason": "None"}, "CANCELLED", "Priority")
        == "Slurm says CANCELLED, reason Priority"
    )
    assert never_started(True, record, "CANCELLED", "") is None  # seen running, or it had nodes: it ran


@pytest.mark.parametrize(
    ("nodes", "gpus", "real", "expected"),
    [
        (1, 1, True, rf_checks.Plan(1, 2, 0, "gloo")),  # NCCL refuses two ranks on the one GPU
        (1, 2, True, rf_checks.Plan(1, 2, 2, None)),
        (1, 8, True, rf_checks.Plan(1, 2, 2, None)),
        (2, 1, True, rf_checks.Plan(2, 1, 1, None)),  # one rank per node: the one GPU each
        (16, 8, True, rf_checks.Plan(2, 1, 1, None)),
        (1, 1, False, rf_checks.Plan(1, 2, 0, None)),  # GRES only: CPU ranks, no GRES asked for
        (1, 0, True, rf_checks.Plan(1, 2, 0, None)),
    ],
)
def test_rank_failure_job_fits_every_node_shape(nodes, gpus, real, expected):
    got = rf_checks.plan(nodes, gpus_per_node=gpus, real_gpus=real)
    assert (got.nodes, got.tasks_per_node, got.gpus_per_node, got.backend) == (
        expected.nodes,
        expected.tasks_per_node,
        expected.gpus_per_node,
        expected.backend,
    )
    assert bool(got.note) == (got.backend == "gloo")


def test_rank_failure_on_cpu_ranks_says_so():
    note = rf_checks.plan(1, gpus_per_node=1, real_gpus=True).note
    assert note == "2 ranks on the CPU over gloo: the node has 1 GPU and NCCL refuses two ranks on one GPU"

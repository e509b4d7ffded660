"""The pure planner on the shapes the suite meets: 1×1, 1×4, 2×8 and 64×8 nodes × GPUs, the quick
subset, the whole handover (``-m multinode``) and an xdist worker. The selections mirror the
``uses`` declarations of tests/acceptance (every request a test file declares, with the tests
that applicability leaves on each shape)."""

from __future__ import annotations

import pytest

from pytest_gpucluster.plan import Facts, JobRequest, Use, jobs, last_order, make_plan
from pytest_gpucluster.plan.jobs import COMPUTE_RANKS_MATCH, INTRA_NODE_PEERS, TORCH_SWEEPS
from pytest_gpucluster.results import codec

# test file → (requests its tests declare, quick?, across nodes?, needs GPUs per node)
SUITE: dict[str, tuple[tuple[JobRequest, ...], bool, bool, int]] = {
    "test_placement.py::test_task_placement[1node-1task]": ((jobs.PLACEMENT_ONE_TASK,), True, False, 0),
    "test_placement.py::test_task_placement[2nodes-1task-each]": ((jobs.PLACEMENT_TWO_NODES,), True, True, 0),
    "test_sharedfs.py::test_mounted_everywhere_as_one_filesystem": ((jobs.SHAREDFS,), True, False, 0),
    "test_gpu_health.py::test_gpu_count_and_model": ((jobs.NODE_PROBE,), False, False, 1),
    "test_infiniband.py::test_infiniband_ports": ((jobs.NODE_PROBE,), True, False, 0),
    "test_inventory.py::test_node_matches_the_profile": ((jobs.NODE_PROBE,), True, False, 0),
    "test_dcgm.py::test_dcgm_diagnostics": ((jobs.NODE_PROBE, jobs.DCGM), False, False, 1),
    "test_nccl.py::test_busbw_inside_node": ((jobs.NCCL_INTRA,), False, False, 0),
    "test_nccl.py::test_busbw_across_nodes": ((jobs.NCCL_INTER,), False, True, 0),
    "test_telemetry.py::test_node_was_sampled": ((jobs.NCCL_INTRA,), True, False, 0),
    "test_compute.py::test_gpu_compute_and_memory": ((jobs.CEILINGS,), False, False, 0),
    "test_gpu_isolation.py::test_job_sees_exactly_its_gpus": ((jobs.ISOLATION_PAIR,), False, False, 2),
    "test_gpu_isolation.py::test_no_foreign_process_on_the_jobs_gpus": (
        (jobs.ISOLATION_PAIR, jobs.ISOLATION_VIEW),
        False,
        False,
        1,
    ),
    "test_gpu_isolation.py::test_gpus_per_task_gives_each_task_its_own_gpu": (
        (jobs.ISOLATION_PAIR, jobs.ISOLATION_PER_TASK),
        False,
        False,
        2,
    ),
    "test_rank_failure.py::test_a_dead_rank_ends_the_job": ((jobs.RANK_FAILURE,), True, False, 0),
    "test_xid.py::test_no_gpu_xid_errors": ((jobs.XID_LOG,), False, False, 1),
    "test_training.py::test_training_one_gpu": ((jobs.TRAIN_BASELINE,), False, False, 0),
    "test_training.py::test_training_on_node": ((jobs.TRAIN_PER_NODE, jobs.TRAIN_BASELINE), False, False, 0),
    "test_training.py::test_training_across_nodes": ((jobs.TRAIN_ACROSS, jobs.TRAIN_BASELINE), False, True, 0),
    "test_sdc.py::test_gpus_compute_bit_identical_results": ((jobs.SDC,), False, False, 0),
    "test_fabric.py::test_fabric_error_counters_did_not_rise": (
        (jobs.FABRIC_AFTER, jobs.FABRIC_BEFORE),
        False,
        False,
        0,
    ),
}


def facts(gpus: int, *, worker: bool = False) -> Facts:
    flags = {TORCH_SWEEPS, COMPUTE_RANKS_MATCH} | ({INTRA_NODE_PEERS} if gpus != 1 else set())
    return Facts(gpus_per_node=gpus, flags=frozenset(flags), sees_whole_selection=not worker)


def selected(f: Facts, nodes: int, *, quick: bool = False) -> list[Use]:
    """The uses of the tests that apply to this shape (and are quick, if asked)."""
    out = []
    for test, (requests, is_quick, across, gpus) in SUITE.items():
        if (quick and not is_quick) or (across and nodes < 2) or f.gpus_per_node < gpus:
            continue
        if test.startswith(("test_nccl.py::test_busbw_inside", "test_telemetry.py")) and f.gpus_per_node == 1:
            continue  # these test files declare their checks not applicable to nodes of one GPU
        out += [Use(r, test) for r in requests]
    return out


def summary(plan) -> dict[str, str]:
    return {j.key: (f"in {j.rides_in}" if j.rides_in else "ahead" if j.ahead else "own") for j in plan.jobs.values()}


def test_one_node_of_one_gpu():
    plan = make_plan(selected(f := facts(1), 1), f)
    assert summary(plan) == {
        "placement-one-task": "ahead",
        "sharedfs": "ahead",
        "node-probe": "own",  # the before snapshot holds the GPUs ahead
        "compute-ceilings": "own",
        "isolation-view": "own",
        "rank-failure": "own",
        "train-baseline": "in train-per-node",
        "train-per-node": "own",
        "dcgm": "own",
        "xid-kernel-log": "in fabric-after",
        "sdc": "own",
        "fabric-after": "own",
        "fabric-before": "ahead",
    }
    # One test reads the pair or, on one-GPU nodes, a view job: the pair is not in this run.
    assert plan.dropped == {"isolation-pair": "nodes have 1 GPU(s); it needs 2"}


def test_one_node_of_four_gpus():
    plan = make_plan(selected(f := facts(4), 1), f)
    s = summary(plan)
    assert s["node-probe"] == s["compute-ceilings"] == "in nccl-intra"
    assert s["nccl-intra"] == "own"
    # The before snapshot is the one early job holding GPUs; the pair and the rank-failure job wait.
    assert s["fabric-before"] == "ahead" and s["isolation-pair"] == s["rank-failure"] == "own"
    assert plan.dropped == {
        "isolation-view": "nodes have 4 GPUs; it is for nodes of at most 1",
        "isolation-per-task": "nodes have 4 GPUs; it is for nodes of at most 3",
    }


@pytest.mark.parametrize("nodes", [2, 64])
def test_many_nodes_of_eight_gpus(nodes):
    plan = make_plan(selected(f := facts(8), nodes), f)
    s = summary(plan)
    assert s["nccl-inter"] == "own" and s["train-across"] == "own"
    assert s["node-probe"] == "in nccl-intra" and s["isolation-pair"] == "own"
    assert [j.key for j in plan.ahead] == ["placement-one-task", "placement-two-nodes", "sharedfs", "fabric-before"]
    # It runs last, never ahead: in the fabric's after job, read in the same task.
    assert s["xid-kernel-log"] == "in fabric-after" and s["fabric-after"] == "own"
    assert plan.jobs["placement-one-task"].tests == ("test_placement.py::test_task_placement[1node-1task]",)
    assert plan.jobs["placement-two-nodes"].tests == ("test_placement.py::test_task_placement[2nodes-1task-each]",)
    assert plan.riders("nccl-intra") == ("node-probe", "compute-ceilings")


def test_quick_subset_has_no_host_so_the_probe_starts_ahead_with_the_light_jobs():
    plan = make_plan(selected(f := facts(8), 2, quick=True), f)
    s = summary(plan)
    # The telemetry check is quick and reads the intra-node job: the probe rides there.
    assert s["nccl-intra"] == "own" and s["node-probe"] == "in nccl-intra"
    assert s["rank-failure"] == "ahead"  # the one early job holding GPUs
    assert set(plan.jobs) == {
        "placement-one-task",
        "placement-two-nodes",
        "sharedfs",
        "node-probe",
        "nccl-intra",
        "rank-failure",
    }


def test_without_the_host_the_rider_has_a_job_of_its_own():
    uses = [Use(jobs.NODE_PROBE, "a"), Use(jobs.RANK_FAILURE, "b"), Use(jobs.CEILINGS, "c")]
    plan = make_plan(uses, facts(8))
    assert summary(plan) == {"node-probe": "ahead", "rank-failure": "own", "compute-ceilings": "own"}


def test_nccl_tests_binaries_host_nothing():
    f = Facts(gpus_per_node=8, flags=frozenset({INTRA_NODE_PEERS, COMPUTE_RANKS_MATCH}))
    plan = make_plan(selected(f, 2), f)
    assert plan.rides_in("node-probe") is None and not plan.starts_ahead("node-probe")
    assert plan.rides_in("compute-ceilings") is None
    without_fabric = [u for u in selected(f, 2) if not u.test.startswith("test_fabric.py")]
    assert make_plan(without_fabric, f).starts_ahead("node-probe")


def test_the_before_snapshot_holds_gpus_and_starts_ahead_of_every_other_gpu_job():
    for gpus, nodes in ((0, 1), (1, 1), (4, 1), (8, 2), (8, 64)):
        plan = make_plan(selected(f := facts(gpus), nodes), f)
        holding = [j.key for j in plan.ahead if j.request.holds_gpus]
        assert holding == ["fabric-before"], (gpus, nodes, holding)
    assert jobs.FABRIC_BEFORE.holds_gpus and jobs.FABRIC_AFTER.holds_gpus
    assert jobs.FABRIC_BEFORE.ahead_order < min(r.ahead_order for r in jobs.SUITE if r is not jobs.FABRIC_BEFORE)


def test_an_xdist_worker_rides_nothing_and_starts_nothing_ahead():
    plan = make_plan(selected(f := facts(8, worker=True), 2), f)
    assert all(j.rides_in is None and not j.ahead for j in plan.jobs.values())


def test_two_requests_of_one_key_must_be_the_same():
    other = JobRequest("node-probe", "something else")
    with pytest.raises(ValueError, match="two different requests share the key 'node-probe'"):
        make_plan([Use(jobs.NODE_PROBE, "a"), Use(other, "b")], facts(8))


def test_parameter_sets_and_the_printed_plan():
    layout = JobRequest("layout", "where each task of a job ran", light=True)
    uses = [Use(layout, f"t{i}", (("nodes", n),)) for i, n in enumerate((1, 1, 2))]
    plan = make_plan(uses, facts(8))
    assert plan.jobs["layout"].params == ((("nodes", 1),), (("nodes", 2),))
    assert plan.lines() == [
        "layout: job of its own, started ahead, 2 parameter sets; where each task of a job ran; read by 3 test(s)"
    ]
    assert codec.encode_plan(plan)["jobs"][0] == {
        "key": "layout",
        "rides_in": None,
        "ahead": True,
        "tests": ["t0", "t1", "t2"],
        "starts": 2,
    }


def test_a_job_that_runs_last_never_starts_ahead_and_says_so():
    last = JobRequest("after", "read after everything", light=True, runs_last=True)
    plan = make_plan([Use(jobs.FABRIC_BEFORE, "t"), Use(last, "t")], facts(8))
    assert summary(plan) == {"fabric-before": "ahead", "after": "own"}
    assert plan.lines()[1].startswith("after: job of its own, after every other job (its tests run last); ")


def test_tests_that_use_a_job_that_runs_last_move_to_the_end_in_their_order():
    requests = [
        (jobs.FABRIC_AFTER, jobs.FABRIC_BEFORE),  # the fabric check on node a
        (jobs.SDC,),
        (),  # a test that declares no job
        (jobs.FABRIC_AFTER, jobs.FABRIC_BEFORE),  # the fabric check on node b
        (jobs.FABRIC_BEFORE,),  # reads only the early snapshot: stays in place
        (jobs.NCCL_INTER,),
    ]
    assert last_order(requests) == [1, 2, 4, 5, 0, 3]
    assert last_order([(jobs.SDC,), ()]) == [0, 1]
    assert last_order([]) == []


def test_the_long_training_run_is_a_job_of_its_own():
    f = facts(4)
    uses = [
        *selected(f, 2),
        Use(jobs.TRAIN_STABILITY, "test_training_stability.py::test_step_time_is_steady_over_a_long_run"),
    ]
    s = summary(make_plan(uses, f))
    assert s["train-stability"] == "own" and s["train-per-node"] == "own"


def test_the_kernel_log_is_a_job_of_its_own_where_the_run_has_no_fabric_snapshot():
    xid = Use(jobs.XID_LOG, "test_xid.py::test_no_xid_on_any_gpu")
    assert summary(make_plan([xid], facts(8))) == {"xid-kernel-log": "own"}
    both = [Use(jobs.FABRIC_AFTER, "test_fabric.py::test_fabric_counters[node1]"), xid]
    assert summary(make_plan(both, facts(8))) == {"fabric-after": "own", "xid-kernel-log": "in fabric-after"}

"""Every count a job runs with is its request's: the suite's requests resolved on nodes of 0, 1, 2,
4 and 8 GPUs, real and not (CPU ranks stand in), against plain expected values; and ``spec_of``
refuses a count set at run time."""

from __future__ import annotations

import dataclasses

import pytest

from pytest_gpucluster.checks import rank_failure as rf_checks
from pytest_gpucluster.config import Profile
from pytest_gpucluster.errors import DeclarationError
from pytest_gpucluster.plan import Shape, jobs
from pytest_gpucluster.plan.shape import EACH, EVERY, HALF, Resolved
from pytest_gpucluster.run import Runner
from pytest_gpucluster.run.context import JobContext
from pytest_gpucluster.run.nodes import NodeSet
from pytest_gpucluster.run.produce import spec_of
from pytest_gpucluster.run.progress import Progress
from pytest_gpucluster.workloads.storage import StorageConfig

GPUS = (0, 1, 2, 4, 8)
REAL = Profile("real", gpus_are_real=True)
FAKE = Profile("fake", gpus_are_real=False)  # GRES only: CPU ranks over gloo stand in

# request → tasks per node, then GPUs per node, for nodes of 0, 1, 2, 4 and 8 real GPUs.
ON_REAL_GPUS = {
    jobs.NCCL_INTRA: ((2, 1, 2, 4, 8), (0, 1, 2, 4, 8)),
    jobs.NCCL_INTRA_TESTS: ((1, 1, 1, 1, 1), (0, 1, 2, 4, 8)),
    jobs.CEILINGS: ((2, 1, 2, 4, 8), (0, 1, 2, 4, 8)),
    jobs.BURN: ((2, 1, 2, 4, 8), (0, 1, 2, 4, 8)),
    jobs.TRAIN_PER_NODE: ((2, 1, 2, 4, 8), (0, 1, 2, 4, 8)),
    jobs.TRAIN_BASELINE: ((1, 1, 1, 1, 1), (0, 1, 1, 1, 1)),
    jobs.TRAIN_ACROSS: ((2, 1, 2, 4, 8), (0, 1, 2, 4, 8)),
    jobs.SDC: ((2, 1, 2, 4, 8), (0, 1, 2, 4, 8)),
    jobs.SOAK: ((2, 1, 2, 4, 8), (0, 1, 2, 4, 8)),
    jobs.STORAGE_CHECKPOINT: ((2, 1, 2, 4, 8), (0, 1, 2, 4, 8)),
    jobs.ISOLATION_PAIR: ((1, 1, 1, 1, 1), (0, 0, 1, 2, 4)),
    jobs.ISOLATION_PAIR_PER_TASK: ((0, 0, 1, 2, 4), (0, 1, 2, 4, 8)),
    jobs.ISOLATION_PER_TASK: ((1, 1, 2, 4, 8), (0, 1, 2, 4, 8)),
    jobs.ISOLATION_VIEW: ((1, 1, 1, 1, 1), (0, 1, 1, 1, 1)),
    jobs.RANK_FAILURE: ((1, 1, 1, 1, 1), (0, 1, 1, 1, 1)),
    jobs.RANK_FAILURE_ONE_NODE: ((2, 2, 2, 2, 2), (0, 0, 2, 2, 2)),
    jobs.PLACEMENT_ONE_TASK: ((1, 1, 1, 1, 1), (0, 0, 0, 0, 0)),
    jobs.PLACEMENT_TWO_TASKS: ((2, 2, 2, 2, 2), (0, 0, 0, 0, 0)),
    jobs.PLACEMENT_TWO_NODES: ((1, 1, 1, 1, 1), (0, 0, 0, 0, 0)),
    jobs.PLACEMENT_EVERY_NODE: ((1, 1, 2, 4, 8), (0, 0, 0, 0, 0)),
    jobs.STORAGE: ((1, 1, 1, 1, 1), (0, 0, 0, 0, 0)),
    jobs.HOST_CHECKS: ((1, 1, 1, 1, 1), (0, 0, 0, 0, 0)),
    jobs.DCGM: ((1, 1, 1, 1, 1), (0, 1, 2, 4, 8)),
}
# The same where the GPUs are not real: two CPU ranks asking for no GPU, but the training plan's
# one rank on a node of one GPU, and the jobs that read the GRES (isolation, dcgmi) keep asking.
ON_FAKE_GPUS = {
    **ON_REAL_GPUS,
    jobs.NCCL_INTRA: ((2, 2, 2, 2, 2), (0, 1, 2, 4, 8)),
    jobs.CEILINGS: ((2, 2, 2, 2, 2), (0, 0, 0, 0, 0)),
    jobs.BURN: ((2, 2, 2, 2, 2), (0, 0, 0, 0, 0)),
    jobs.TRAIN_PER_NODE: ((2, 1, 2, 2, 2), (0, 0, 0, 0, 0)),
    jobs.TRAIN_BASELINE: ((1, 1, 1, 1, 1), (0, 0, 0, 0, 0)),
    jobs.TRAIN_ACROSS: ((2, 1, 2, 2, 2), (0, 0, 0, 0, 0)),
    jobs.SDC: ((2, 2, 2, 2, 2), (0, 0, 0, 0, 0)),
    jobs.SOAK: ((2, 2, 2, 2, 2), (0, 0, 0, 0, 0)),
    jobs.STORAGE_CHECKPOINT: ((2, 2, 2, 2, 2), (0, 1, 2, 4, 8)),
    jobs.RANK_FAILURE: ((1, 1, 1, 1, 1), (0, 0, 0, 0, 0)),
    jobs.RANK_FAILURE_ONE_NODE: ((2, 2, 2, 2, 2), (0, 0, 0, 0, 0)),
}


def _counts(profile: Profile, request: jobs.JobRequest) -> tuple[tuple[int, ...], tuple[int, ...]]:
    resolved = [request.resolve(profile, g) for g in GPUS]
    return tuple(r.tasks_per_node for r in resolved), tuple(r.gpus_per_node for r in resolved)


@pytest.mark.parametrize(("profile", "expected"), [(REAL, ON_REAL_GPUS), (FAKE, ON_FAKE_GPUS)], ids=["real", "fake"])
def test_tasks_and_gpus_per_node_of_each_request(
    profile: Profile, expected: dict[jobs.JobRequest, tuple[tuple[int, ...], tuple[int, ...]]]
) -> None:
    got = {request.key: _counts(profile, request) for request in expected}
    assert got == {request.key: counts for request, counts in expected.items()}


def test_nodes_gpus_per_task_and_exclusive_are_declared_too() -> None:
    on_four = {r.key: r.resolve(REAL, 4) for r in jobs.SUITE}
    assert on_four["train-per-node"].nodes == on_four["soak"].nodes == EACH
    assert on_four["nccl-inter"].nodes == on_four["sdc"].nodes == EVERY
    assert (on_four["rank-failure"].nodes, on_four["rank-failure-one-node"].nodes) == (2, 1)
    assert on_four["train-baseline"].nodes == on_four["placement-two-tasks"].nodes == 1
    per_task = {k for k, r in on_four.items() if r.gpus_per_task is not None}
    assert per_task == {"isolation-pair-per-task", "isolation-per-task"}
    assert on_four["isolation-pair-per-task"] == Resolved(EVERY, 2, 4, 1, False)
    # Measuring jobs have their nodes to themselves, light ones share; dcgmi diag always has them.
    assert on_four["sdc"].exclusive and not on_four["placement-one-task"].exclusive
    shared = dataclasses.replace(REAL, exclusive=False)
    assert not jobs.SDC.resolve(shared, 4).exclusive and jobs.DCGM.resolve(shared, 4).exclusive


def test_the_checkpoint_takes_the_profiles_ranks_where_it_sets_them() -> None:
    profile = dataclasses.replace(REAL, storage=StorageConfig(checkpoint_ranks_per_node=1))
    assert [jobs.STORAGE_CHECKPOINT.resolve(profile, g).tasks_per_node for g in GPUS] == [1, 1, 1, 1, 1]


@pytest.mark.parametrize("profile", [REAL, FAKE], ids=["real", "fake"])
def test_the_rank_failure_requests_are_the_rank_failure_plan(profile: Profile) -> None:
    for live in (1, 2, 3):
        for gpus in GPUS:
            plan = rf_checks.plan(live, gpus_per_node=gpus, real_gpus=profile.gpus_are_real)
            request = jobs.RANK_FAILURE if plan.nodes == 2 else jobs.RANK_FAILURE_ONE_NODE
            r = request.resolve(profile, gpus)
            assert (r.nodes, r.tasks_per_node, r.gpus_per_node) == (plan.nodes, plan.tasks_per_node, plan.gpus_per_node)


def test_every_request_resolves_on_every_node_shape() -> None:
    for request in jobs.SUITE:
        for profile in (REAL, FAKE):
            for gpus in GPUS:
                r = request.resolve(profile, gpus)
                assert r.tasks_per_node >= 0 and 0 <= r.gpus_per_node <= gpus, (request.key, gpus, r)


def test_a_shape_takes_only_its_words() -> None:
    assert (
        Shape(tasks_per_node=HALF, gpus_per_node=HALF).describe() == "every node, half the GPUs per node, half the GPUs"
    )
    assert jobs.CEILINGS.shape.describe().startswith("every node, the compute plan's ranks (a GPU each, or CPU ranks)")
    with pytest.raises(ValueError, match="Shape\\(gpus_per_node='ranks'\\)"):
        Shape(gpus_per_node=jobs.RANKS)


def test_spec_of_refuses_a_count_set_at_run_time() -> None:
    profile = Profile("local", executor="local", gpus_are_real=False)
    ctx = JobContext(
        profile,
        run_id="r1",
        gpus_per_node=4,
        gpu_model="cpu",
        thresholds=None,  # type: ignore[arg-type]
        nodes=NodeSet(profile),
        local_gpus=None,
        runner=Runner(limit_s=1.0),
        progress=Progress(),
    )
    with pytest.raises(DeclarationError) as refused:
        spec_of(ctx, jobs.SDC, tasks_per_node=4, gpus_per_node=4)
    said = str(refused.value)
    assert said.startswith("job request 'sdc': gpus_per_node, tasks_per_node come from its declared shape")
    assert "another request in plan/jobs.py" in said
    # What the shape leaves to the area is the area's.
    spec = spec_of(ctx, jobs.TRAIN_PER_NODE, name="train-n1", nodelist=("n1",), timeout_min=7, env={"A": "1"})
    assert (spec.name, spec.nodes, spec.tasks_per_node, spec.gpus_per_node, spec.timeout_min) == (
        "r1-train-n1",
        1,
        2,
        0,
        7,
    )
    assert spec.env is not None and spec.env["A"] == "1"

"""The jobs that measure ask for whole nodes (``--exclusive``), the light ones that run side by side
do not, and a profile's ``exclusive = false`` lets the measuring jobs share their nodes: the job
shapes of a two-node Slurm profile, its nodes read from the test cluster's recorded ``sinfo --json``."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from pytest_gpucluster import slurm
from pytest_gpucluster.config import Profile, load
from pytest_gpucluster.plan import jobs
from pytest_gpucluster.run import Runner
from pytest_gpucluster.run.context import JobContext
from pytest_gpucluster.run.nodes import NodeSet
from pytest_gpucluster.run.produce import spec_of
from pytest_gpucluster.run.progress import Progress

REPO = Path(__file__).resolve().parents[2]
SINFO = REPO / "tests" / "data" / "slurm" / "sinfo-22.05-healthy.json"


def _context(monkeypatch: pytest.MonkeyPatch, **keys: bool) -> JobContext:
    monkeypatch.setattr(slurm.commands, "_run_once", lambda argv, timeout_s: SINFO.read_text())
    profile = Profile(
        "p", executor="slurm", partition="debug", nodes=2, gpus_per_node=4, gpus_are_real=False, thresholds="cpu"
    )
    profile = dataclasses.replace(profile, **keys)
    return JobContext(
        profile,
        run_id="r1",
        gpus_per_node=4,
        gpu_model="cpu",
        thresholds=load(REPO / "thresholds.toml").thresholds_for(profile),
        nodes=NodeSet(profile),
        local_gpus=None,
        runner=Runner(limit_s=1.0),
        progress=Progress(),
    )


MEASURING = (jobs.NCCL_INTRA, jobs.NCCL_INTER, jobs.TRAIN_PER_NODE, jobs.TRAIN_ACROSS, jobs.SDC, jobs.BURN)
LIGHT = (jobs.PLACEMENT_ONE_TASK, jobs.SHAREDFS, jobs.FABRIC_BEFORE, jobs.ISOLATION_PAIR, jobs.RANK_FAILURE)


def test_measuring_jobs_take_whole_nodes_and_light_ones_share(monkeypatch):
    ctx = _context(monkeypatch)
    assert all(spec_of(ctx, request).exclusive for request in MEASURING)
    assert not any(spec_of(ctx, request).exclusive for request in LIGHT)
    assert spec_of(ctx, jobs.NCCL_INTRA).nodelist == ("node1", "node2")


def test_a_profile_can_let_measuring_jobs_share_their_nodes(monkeypatch):
    ctx = _context(monkeypatch, exclusive=False)
    assert not any(spec_of(ctx, request).exclusive for request in MEASURING)
    assert spec_of(ctx, jobs.DCGM).exclusive  # dcgmi diag always has its nodes to itself


def test_with_every_node_held_by_other_work_a_job_of_every_node_is_the_holders_fault(monkeypatch):
    from pytest_gpucluster.errors import NodesHeld
    from pytest_gpucluster.run.areas import training

    ctx = _context(monkeypatch)
    sentence = "other work held node1, node2 past queue_timeout_s (45 s): job 7 of bob (train)"
    ctx.node_set.hold({"node1": "job 7 of bob", "node2": "job 7 of bob"}, sentence)
    for attempt in (lambda: spec_of(ctx, jobs.NCCL_INTER), lambda: training.per_node(ctx)):
        with pytest.raises(NodesHeld) as held:
            attempt()
        assert str(held.value).startswith(sentence)

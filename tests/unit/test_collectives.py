"""The collective workload on CPU (gloo) through submitit's local executor: two ranks, tiny sizes.

The same function runs with NCCL on GPUs; here it proves the sweep, the groups and the
correctness check, including that a corrupted result is caught and its rank named.
"""

from __future__ import annotations

import socket

import pytest

from pytest_gpucluster.errors import LaunchError
from pytest_gpucluster.launch import JobSpec
from pytest_gpucluster.launch.local_backend import LocalLauncher
from pytest_gpucluster.workloads.busbw import OPS
from pytest_gpucluster.workloads.collectives import collective_sweeps

SMALL = {"min_bytes": 4096, "max_bytes": 16384, "warmup_iters": 1, "iters": 2, "timeout_s": 60}


@pytest.fixture
def launcher(tmp_path):
    return LocalLauncher(folder=tmp_path, queue_timeout_s=60, poll_s=0.2)


def _run(launcher, **kwargs):
    spec = JobSpec(name="collectives-unit", nodes=1, tasks_per_node=2, gpus_per_node=0, timeout_min=3)
    results = launcher.run(collective_sweeps, spec, **{**SMALL, **kwargs})
    assert results[1].value == []  # only the group's first rank reports
    return {s.op: s for s in results[0].value}


def test_every_collective_is_measured_and_right(launcher):
    sweeps = _run(launcher, ops=OPS, groups="node")
    assert set(sweeps) == set(OPS)
    host = socket.gethostname()
    for op, sweep in sweeps.items():
        assert sweep.correct, sweep.correctness_problems()
        assert (sweep.nodes, sweep.n_ranks, sweep.backend, sweep.nccl_version) == ((host,), 2, "gloo", None)
        assert [r.size_bytes for r in sweep.rows if not r.in_place or op in ("all_reduce", "broadcast")] == [
            4096,
            8192,
            16384,
        ]
        assert all(r.busbw > 0 and r.time_us > 0 for r in sweep.rows)
        assert (sweep.iters, sweep.warmup_iters) == (2, 1)
    assert {r.in_place for r in sweeps["all_gather"].rows} == {False, True}
    assert {r.in_place for r in sweeps["all_reduce"].rows} == {True}
    assert {r.in_place for r in sweeps["alltoall"].rows} == {False}
    assert sweeps["all_gather"].rows[0].count == 4096 // 4 // 2  # per-rank count, as nccl-tests prints it


def test_a_corrupted_result_is_caught_and_its_rank_named(launcher):
    sweeps = _run(launcher, ops=OPS, groups="world", corrupt_rank=1)
    host = socket.gethostname()
    for sweep in sweeps.values():
        assert not sweep.correct
        assert sweep.wrong_places == (f"{host}:rank1",)
        assert all(r.wrong == 1 and r.max_error == 1.0 for r in sweep.rows)
        assert f"on {host}:rank1" in sweep.correctness_problems()[0]


def test_fallbacks_for_backends_without_the_collective_are_right_and_say_so(launcher):
    sweeps = _run(launcher, ops=("reduce_scatter", "all_gather"), force_fallback=True)
    assert sweeps["reduce_scatter"].implementation.startswith("all_reduce + slice")
    assert "busbw is not a reduce_scatter's" in sweeps["reduce_scatter"].implementation
    assert sweeps["all_gather"].implementation.startswith("all_gather(list of views)")
    for sweep in sweeps.values():
        assert sweep.correct, sweep.correctness_problems()


def test_a_group_naming_a_node_outside_the_job_fails_with_the_names(launcher):
    with pytest.raises(LaunchError, match="names nodes not in this job"):
        _run(launcher, ops=("all_reduce",), groups=[["no-such-node"]])

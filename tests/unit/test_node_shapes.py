"""Node shapes of 0, 1, 2, 4 and 8 GPUs: what the login side plans before any job exists. A node of
one GPU has no intra-node collective (and so no job for it: the node probe and the compute
ceilings have jobs of their own); nodes without GPUs keep their CPU stand-in sweeps."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from pytest_gpucluster import nccl_checks
from pytest_gpucluster.workloads.compute import ComputeConfig

EVERYTHING = frozenset({"node_telemetry", "nodes_gpus", "inventory", "ib_nodes"})


def _session(gpus_per_node: int, *, real: bool = True, tests=("test_busbw_inside_node", "test_gpu_compute_and_memory"),
             fixtures=EVERYTHING) -> SimpleNamespace:  # fmt: skip
    profile = SimpleNamespace(gpus_are_real=real, nccl=SimpleNamespace(nccl_tests_dir=None), compute=ComputeConfig())
    return SimpleNamespace(gpus_per_node=gpus_per_node, profile=profile, planned_fixtures=fixtures,
                           will_run=lambda *names: any(n in tests for n in names))  # fmt: skip


@pytest.mark.parametrize(("gpus", "real"), [(1, True), (1, False)])
def test_one_gpu_per_node_has_no_intra_node_job(gpus, real):
    gc = _session(gpus, real=real)
    assert nccl_checks.no_intra_node_collective(gc) == "node has 1 GPU: no intra-node collective"
    assert not nccl_checks._intra_job_planned(gc)
    assert not nccl_checks.probe_rides_along(gc)  # the probe runs in a job of its own
    assert nccl_checks.ceilings_ride_along(gc) is None  # so do the compute ceilings


@pytest.mark.parametrize(("gpus", "real"), [(0, True), (0, False), (2, True), (4, False), (8, True)])
def test_other_shapes_keep_the_intra_node_job_and_what_rides_in_it(gpus, real):
    gc = _session(gpus, real=real)
    assert nccl_checks.no_intra_node_collective(gc) is None
    assert nccl_checks._intra_job_planned(gc)
    assert nccl_checks.probe_rides_along(gc)

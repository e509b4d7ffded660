"""Node shapes of 0, 1, 2, 4 and 8 GPUs: what the login side plans before any job exists. A node of
one GPU has no intra-node collective (and so no job for it: the node probe and the compute
ceilings have jobs of their own); nodes without GPUs keep their CPU stand-in sweeps."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from pytest_gpucluster.plan import Facts, Use, facts, jobs, make_plan
from pytest_gpucluster.run.areas import nccl
from pytest_gpucluster.workloads.compute import ComputeConfig

READERS = (jobs.NCCL_INTRA, jobs.NODE_PROBE, jobs.CEILINGS)


def _session(gpus_per_node: int, *, real: bool = True) -> SimpleNamespace:
    profile = SimpleNamespace(gpus_are_real=real, nccl=SimpleNamespace(nccl_tests_dir=None), compute=ComputeConfig())
    gc = SimpleNamespace(gpus_per_node=gpus_per_node, profile=profile)
    known = Facts(gpus_per_node=gpus_per_node, flags=facts.flags(profile, gpus_per_node))
    gc.plan = make_plan([Use(r, f"test_{r.key}") for r in READERS], known)
    return gc


@pytest.mark.parametrize(("gpus", "real"), [(1, True), (1, False)])
def test_one_gpu_per_node_has_no_intra_node_job(gpus, real):
    gc = _session(gpus, real=real)
    assert facts.no_intra_node_collective(gc.gpus_per_node) == "node has 1 GPU: no intra-node collective"
    assert not gc.plan.has(jobs.NCCL_INTRA.key)
    assert not nccl.probe_rides_along(gc)  # the probe runs in a job of its own
    assert gc.plan.starts_ahead(jobs.NODE_PROBE.key)
    assert nccl.ceilings_ride_along(gc) is None  # so do the compute ceilings


@pytest.mark.parametrize(("gpus", "real"), [(0, True), (0, False), (2, True), (4, False), (8, True)])
def test_other_shapes_keep_the_intra_node_job_and_what_rides_in_it(gpus, real):
    gc = _session(gpus, real=real)
    assert facts.no_intra_node_collective(gc.gpus_per_node) is None
    assert gc.plan.has(jobs.NCCL_INTRA.key)
    assert nccl.probe_rides_along(gc)
    assert not gc.plan.starts_ahead(jobs.NODE_PROBE.key)

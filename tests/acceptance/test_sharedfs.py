"""Shared filesystem: mounted on every node as the login node's filesystem,
large enough, and coherent across nodes (read-back, concurrent appends, atomic rename). One job
on all nodes, in a fresh private directory that is removed afterwards."""

from __future__ import annotations

import pytest

from pytest_gpucluster.checks import sharedfs as sharedfs_checks
from pytest_gpucluster.plan import jobs
from pytest_gpucluster.verdict import Measurement
from pytest_gpucluster.workloads import sharedfs


def _shared(gpucluster):
    """(prepared directory, one report per node, job id), measured once per run."""
    root = gpucluster.profile.shared_fs
    if root is None and gpucluster.profile.executor == "slurm":
        pytest.skip(f"profile {gpucluster.profile.name!r} sets no shared_fs")
    root = root or str(gpucluster.job_root)  # local: one node, the run's own temporary folder

    def produce():
        prepared = sharedfs.prepare(root)
        try:
            spec = gpucluster.spec("sharedfs", all_nodes=True, gpus_per_node=0)
            results = gpucluster.run(
                sharedfs.check_node, spec, root_template=root, name=prepared.name, token=prepared.token
            )
        finally:
            sharedfs.cleanup(prepared)
        return prepared, [r.value for r in results], results[0].job_id

    return gpucluster.once(("sharedfs", root), produce, light=True)


pytestmark = pytest.mark.uses(jobs.SHAREDFS, start=_shared)


@pytest.fixture
def shared(gpucluster):
    return _shared(gpucluster)


@pytest.mark.quick
def test_mounted_everywhere_as_one_filesystem(shared, gpucluster, judge):
    prepared, reports, job = shared
    problems = sharedfs_checks.visibility_problems(reports, prepared, len(gpucluster.nodes))
    judge.problems(problems, f"job {job}: {prepared.root_template} is not one shared filesystem on every node")


def test_capacity_and_free_space(shared, judge):
    prepared, reports, job = shared
    space = sharedfs_checks.space(reports, prepared.root)
    judge.all(Measurement(metric, gib, "GiB", where, job_id=job) for metric, where, gib in space)


@pytest.mark.across_nodes
def test_file_written_on_one_node_reads_back_on_another(shared, gpucluster, judge):
    _, reports, job = shared
    problems = sharedfs_checks.readback_problems(reports, len(gpucluster.nodes))
    judge.problems(problems, f"job {job}: files do not read back byte-identical across nodes")


def test_concurrent_appends_lose_nothing(shared, gpucluster, judge):
    _, reports, job = shared
    problems = sharedfs_checks.append_problems(reports, len(gpucluster.nodes))
    judge.problems(problems, f"job {job}: concurrent appends to one shared file lost data")


@pytest.mark.across_nodes
def test_atomic_rename_is_seen_complete_on_another_node(shared, gpucluster, judge):
    _, reports, job = shared
    problems = sharedfs_checks.readback_problems(reports, len(gpucluster.nodes), renamed=True)
    judge.problems(problems, f"job {job}: a file published by rename was not seen complete on another node")

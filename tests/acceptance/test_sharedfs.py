"""Shared filesystem: mounted on every node as the login node's filesystem,
large enough, and coherent across nodes (read-back, concurrent appends, atomic rename). One job
on all nodes, in a fresh private directory that is removed afterwards."""

from __future__ import annotations

import pytest

from pytest_gpucluster.checks import sharedfs as sharedfs_checks
from pytest_gpucluster.plan import jobs
from pytest_gpucluster.verdict import Measurement

pytestmark = pytest.mark.uses(jobs.SHAREDFS)  # measures no speed: starts ahead (plan/jobs.py)


@pytest.fixture
def shared(cluster, measured):
    """(prepared directory, one report per node, job id) of the run's shared-filesystem job."""
    if cluster.profile.shared_fs is None and cluster.profile.executor == "slurm":
        pytest.skip(f"profile {cluster.profile.name!r} sets no shared_fs")
    return measured()


@pytest.mark.quick
def test_mounted_everywhere_as_one_filesystem(shared, cluster, judge):
    prepared, reports, job = shared
    problems = sharedfs_checks.visibility_problems(reports, prepared, len(cluster.nodes))
    judge.problems(problems, f"job {job}: {prepared.root_template} is not one shared filesystem on every node")


def test_capacity_and_free_space(shared, judge):
    prepared, reports, job = shared
    space = sharedfs_checks.space(reports, prepared.root)
    judge.all(Measurement(metric, gib, "GiB", where, job_id=job) for metric, where, gib in space)


@pytest.mark.across_nodes
def test_file_written_on_one_node_reads_back_on_another(shared, cluster, judge):
    _, reports, job = shared
    problems = sharedfs_checks.readback_problems(reports, len(cluster.nodes))
    judge.problems(problems, f"job {job}: files do not read back byte-identical across nodes")


def test_concurrent_appends_lose_nothing(shared, cluster, judge):
    _, reports, job = shared
    problems = sharedfs_checks.append_problems(reports, len(cluster.nodes))
    judge.problems(problems, f"job {job}: concurrent appends to one shared file lost data")


@pytest.mark.across_nodes
def test_atomic_rename_is_seen_complete_on_another_node(shared, cluster, judge):
    _, reports, job = shared
    problems = sharedfs_checks.readback_problems(reports, len(cluster.nodes), renamed=True)
    judge.problems(problems, f"job {job}: a file published by rename was not seen complete on another node")

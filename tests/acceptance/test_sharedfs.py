"""Shared filesystem: mounted on every node as the login node's filesystem,
large enough, and coherent across nodes (read-back, concurrent appends, atomic rename). One job
on all nodes, in a fresh private directory that is removed afterwards."""

from __future__ import annotations

import pytest

from pytest_gpucluster.checks import sharedfs as sharedfs_checks
from pytest_gpucluster.plan import jobs

pytestmark = pytest.mark.uses(jobs.SHAREDFS)  # measures no speed: starts ahead (plan/jobs.py)


@pytest.fixture
def shared(cluster, measured):
    """The run's shared-filesystem job (``run.areas.sharedfs.Shared``): the prepared directory,
    the reports of the nodes that answered, the job id, the nodes silent in it, its nodes."""
    if cluster.profile.shared_fs is None and cluster.profile.executor == "slurm":
        pytest.skip(f"profile {cluster.profile.name!r} sets no shared_fs")
    return measured()


@pytest.mark.quick
def test_mounted_everywhere_as_one_filesystem(shared, judge):
    found = sharedfs_checks.visibility_findings(shared.reports, shared.prepared, shared.nodes, shared.silent)
    judge.findings(
        found, f"job {shared.job_id}: {shared.prepared.root_template} is not one shared filesystem on every node"
    )


def test_capacity_and_free_space(shared, judge):
    judge.all(sharedfs_checks.space(shared.reports, shared.prepared.root, shared.job_id))


@pytest.mark.across_nodes
def test_file_written_on_one_node_reads_back_on_another(shared, judge):
    found = sharedfs_checks.readback_findings(shared.reports, shared.nodes)
    judge.findings(found, f"job {shared.job_id}: files do not read back byte-identical across nodes")


def test_concurrent_appends_lose_nothing(shared, judge):
    found = sharedfs_checks.append_findings(shared.reports, shared.nodes)
    judge.findings(found, f"job {shared.job_id}: concurrent appends to one shared file lost data")


@pytest.mark.across_nodes
def test_atomic_rename_is_seen_complete_on_another_node(shared, judge):
    found = sharedfs_checks.readback_findings(shared.reports, shared.nodes, renamed=True)
    judge.findings(found, f"job {shared.job_id}: a file published by rename was not seen complete on another node")

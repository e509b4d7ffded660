"""Storage: how fast the shared filesystem is, every node at once in one job (docs/storage.md):
large-block write and read-back per node and summed, small-file metadata rate, how soon a file
written on one node is seen on another, a POSIX lock across nodes, the mounts compared between
nodes, and a cold ``import`` of the framework. A node slower than its peers is named with its
mount; every node slow alike is the shared filesystem's finding, and no node is rejected for it."""

from __future__ import annotations

import pytest

from pytest_gpucluster.checks import storage as storage_checks
from pytest_gpucluster.checks import storage_coherence as coherence
from pytest_gpucluster.plan import jobs

pytestmark = pytest.mark.uses(jobs.STORAGE)


@pytest.fixture
def stored(cluster, measured):
    """The run's storage job (``run.areas.storage.Stored``): a report per node, the job id, its nodes."""
    if cluster.profile.shared_fs is None and cluster.profile.executor == "slurm":
        pytest.skip(f"profile {cluster.profile.name!r} sets no shared_fs")
    return measured()


def _conclude(judge, record, stored, judged, what):
    record("storage", **storage_checks.section(stored.reports))
    judge.attributed(judged.verdicts, judged.unjudged, judged.findings, what)


def test_mounted_alike_on_every_node(stored, judge):
    judge.findings(coherence.mount_findings(stored.reports), f"job {stored.job_id}: the nodes mount it differently")


def test_write_and_read_throughput(stored, cluster, judge, record):
    judged = storage_checks.throughput(stored.reports, stored.nodes, cluster.thresholds, stored.job_id)
    _conclude(judge, record, stored, judged, f"job {stored.job_id}: shared-filesystem throughput")


def test_metadata_rate(stored, cluster, judge, record):
    judged = storage_checks.metadata(stored.reports, stored.nodes, cluster.thresholds, stored.job_id)
    _conclude(judge, record, stored, judged, f"job {stored.job_id}: small-file creates, stats and unlinks")


@pytest.mark.across_nodes
def test_write_seen_on_another_node_soon(stored, cluster, judge, record):
    judged = coherence.visibility(stored.reports, cluster.thresholds, stored.job_id)
    _conclude(judge, record, stored, judged, f"job {stored.job_id}: a file written on one node seen on another")


@pytest.mark.across_nodes
def test_lock_held_on_one_node_keeps_the_others_out(stored, judge):
    judge.findings(coherence.lock_findings(stored.reports), f"job {stored.job_id}: POSIX locks across nodes")


def test_cold_import_of_the_framework(stored, cluster, judge, record):
    judged = storage_checks.cold_import(stored.reports, cluster.thresholds, stored.job_id)
    _conclude(judge, record, stored, judged, f"job {stored.job_id}: cold import in the jobs' interpreter")

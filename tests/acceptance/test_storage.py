"""Storage: how fast the shared filesystem is, every node at once in one job (docs/storage.md):
large-block write and read-back per node and summed, small-file metadata rate, how soon a file
written on one node is seen on another, a lockf and a flock lock across nodes, the mounts compared
between nodes, and a cold ``import`` of the framework; and a checkpoint from every GPU, saved with
``torch.distributed.checkpoint`` and restored bit for bit. A node slower than its peers is named
with its mount; every node slow alike is the shared filesystem's finding, and no node is rejected
for it."""

from __future__ import annotations

import pytest

from pytest_gpucluster.checks import storage as storage_checks
from pytest_gpucluster.checks import storage_checkpoint as checkpoint
from pytest_gpucluster.checks import storage_coherence as coherence
from pytest_gpucluster.plan import jobs

STORAGE = pytest.mark.uses(jobs.STORAGE)
CHECKPOINT = pytest.mark.uses(jobs.STORAGE_CHECKPOINT)


def _shared_fs(cluster):
    if cluster.profile.shared_fs is None and cluster.profile.executor == "slurm":
        pytest.skip(f"profile {cluster.profile.name!r} sets no shared_fs")


@pytest.fixture
def stored(cluster, measured):
    """The run's storage job (``run.areas.storage.Stored``): a report per node, the job id, its nodes."""
    _shared_fs(cluster)
    return measured(jobs.STORAGE)


@pytest.fixture
def checkpointed(cluster, measured):
    """The run's checkpoint job (``run.areas.storage.Checkpointed``): every rank's save and restore."""
    _shared_fs(cluster)
    if not cluster.profile.storage.checkpoint:
        pytest.skip(f"profile {cluster.profile.name!r} leaves the checkpoint out ([storage] checkpoint = false)")
    return measured(jobs.STORAGE_CHECKPOINT)


def _conclude(judge, record, stored, judged, what):
    record("storage", **storage_checks.section(stored.reports))
    judge.attributed(judged.verdicts, judged.unjudged, judged.findings, what)


@STORAGE
def test_mounted_alike_on_every_node(stored, judge):
    judge.findings(coherence.mount_findings(stored.reports), f"job {stored.job_id}: the nodes mount it differently")


@STORAGE
def test_write_and_read_throughput(stored, cluster, judge, record):
    judged = storage_checks.throughput(stored.reports, stored.nodes, cluster.thresholds, stored.job_id)
    _conclude(judge, record, stored, judged, f"job {stored.job_id}: shared-filesystem throughput")


@STORAGE
def test_metadata_rate(stored, cluster, judge, record):
    judged = storage_checks.metadata(stored.reports, stored.nodes, cluster.thresholds, stored.job_id)
    _conclude(judge, record, stored, judged, f"job {stored.job_id}: small-file creates, stats and unlinks")


@STORAGE
@pytest.mark.across_nodes
def test_write_seen_on_another_node_soon(stored, cluster, judge, record):
    judged = coherence.visibility(stored.reports, cluster.thresholds, stored.job_id)
    _conclude(judge, record, stored, judged, f"job {stored.job_id}: a file written on one node seen on another")


@STORAGE
@pytest.mark.across_nodes
def test_renamed_file_seen_whole_on_another_node_soon(stored, cluster, judge, record):
    judged = coherence.visibility(stored.reports, cluster.thresholds, stored.job_id, renamed=True)
    _conclude(judge, record, stored, judged, f"job {stored.job_id}: a file renamed on one node seen whole on another")


@STORAGE
@pytest.mark.across_nodes
def test_lock_held_on_one_node_keeps_the_others_out(stored, judge, record):
    record("storage", **storage_checks.section(stored.reports), locks=coherence.locks_tried(stored.reports))
    judge.findings(coherence.lock_findings(stored.reports), f"job {stored.job_id}: lockf and flock across nodes")


@STORAGE
@pytest.mark.across_nodes
def test_large_directory_listed_from_another_node(stored, cluster, judge, record):
    if not cluster.profile.storage.large_dir_files:
        pytest.skip(f"profile {cluster.profile.name!r} leaves the large directory out ([storage] large_dir_files = 0)")
    judged = coherence.large_directory(stored.reports, cluster.thresholds, stored.job_id)
    _conclude(judge, record, stored, judged, f"job {stored.job_id}: one directory of many files listed on another node")


@STORAGE
def test_cold_import_of_the_framework(stored, cluster, judge, record):
    if not cluster.profile.storage.import_module:
        pytest.skip(f'profile {cluster.profile.name!r} leaves the cold import out ([storage] import_module = "")')
    judged = storage_checks.cold_import(stored.reports, cluster.thresholds, stored.job_id)
    _conclude(judge, record, stored, judged, f"job {stored.job_id}: cold import in the jobs' interpreter")


@CHECKPOINT
def test_checkpoint_restores_bit_for_bit(checkpointed, judge, record):
    record("storage", **checkpoint.section(checkpointed.ranks, checkpointed.model))
    judge.findings(
        checkpoint.restored_bits(checkpointed.ranks, checkpointed.nodes),
        f"job {checkpointed.job_id}: a checkpoint of {checkpointed.model} saved and restored from every GPU",
    )


@CHECKPOINT
def test_checkpoint_save_and_restore_rates(checkpointed, cluster, judge, record):
    judged = checkpoint.rates(checkpointed.ranks, cluster.thresholds, checkpointed.job_id)
    record("storage", **checkpoint.section(checkpointed.ranks, checkpointed.model))
    judge.attributed(
        judged.verdicts,
        judged.unjudged,
        (*checkpoint.not_measured(checkpointed.ranks, checkpointed.nodes), *judged.findings),
        f"job {checkpointed.job_id}: checkpoint save and restore from every GPU",
    )

"""The storage workload on this machine's real filesystems: two processes as two nodes in one
directory (their barriers, streams, metadata, ping-pong and lock are the real ones), the
page-cache fallback where O_DIRECT is refused (tmpfs), the free-space limit, and mount facts
read from mountinfo text."""

from __future__ import annotations

import dataclasses
import os
import time
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from pathlib import Path

import pytest

from pytest_gpucluster.config.load import load
from pytest_gpucluster.errors import ConfigError
from pytest_gpucluster.workloads import storage
from pytest_gpucluster.workloads import storage_coherence as coherence
from pytest_gpucluster.workloads.context import TaskContext
from pytest_gpucluster.workloads.storage import (
    BUFFERED,
    DIRECT,
    MIN_STREAM_BYTES,
    StorageConfig,
    StorageReport,
    measure_node,
    mount_facts,
    stream_bytes,
)

REPO = Path(__file__).resolve().parents[2]
SMALL = StorageConfig(
    file_bytes=8 * 2**20,
    block_bytes=2**20,
    metadata_files=50,
    visibility_tries=3,
    visibility_timeout_s=5.0,
    import_module="json",
    engine="python",
    large_dir_files=300,
)

# Lines as the kernel writes them: an NFS 4.2 mount with nconnect, and a tmpfs below it whose
# mount point has a space (written \040).
MOUNTINFO = (
    "22 1 254:0 / / rw,relatime shared:1 - ext4 /dev/vda1 rw,discard\n"
    "301 22 0:55 / /mnt/shared rw,relatime shared:180 - nfs4 10.0.0.5:/export rw,vers=4.2,hard,nconnect=16,"
    "proto=tcp,clientaddr=10.0.0.21,local_lock=none,addr=10.0.0.5\n"
    "302 301 0:56 / /mnt/shared/with\\040space rw,relatime shared:181 - tmpfs tmpfs rw,size=1024k\n"
)


def node(
    rank: int, world: int, root: str, name: str, config: StorageConfig = SMALL, timeout_s: float = 30
) -> StorageReport:
    hosts = tuple(f"n{i}" for i in range(world))
    ctx = TaskContext("1", rank, 0, rank, world, world, hosts[rank], hosts, hosts[0], 29500)
    return measure_node(ctx, root_template=root, name=name, config=config, streams=2, timeout_s=timeout_s, limit_s=60)


def slow_second_node(rank: int, world: int, root: str, name: str, config: StorageConfig) -> StorageReport:
    """``node`` with 1 s waits, where rank 1's streams take 4 s longer than rank 0's."""
    if rank == 1:
        fast = storage.measure_streams

        def slow(*args, **kwargs):
            time.sleep(4)
            return fast(*args, **kwargs)

        storage.measure_streams = slow  # this process is rank 1's alone
    return node(rank, world, root, name, config, timeout_s=1)


def run_nodes(root: Path, world: int = 2, config: StorageConfig = SMALL) -> list[StorageReport]:
    (root / "job").mkdir()
    with ProcessPoolExecutor(world) as pool:
        return list(
            pool.map(node, range(world), [world] * world, [str(root)] * world, ["job"] * world, [config] * world)
        )


def test_two_nodes_measure_every_part_and_leave_only_the_jobs_shared_files(tmp_path):
    reports = run_nodes(tmp_path)
    for r in reports:
        assert r.barrier_timeout is None and r.errors == ()
        assert r.stream is not None and r.stream.verified and r.stream.size_bytes == 2 * 8 * 2**20
        assert len(r.stream.each) == 2 and all(s.size_bytes == 8 * 2**20 for s in r.stream.each)
        assert r.stream.mode in (DIRECT, BUFFERED) and r.stream.write_mb_s > 0
        assert r.metadata_files == 50 and r.metadata_ops_s > 0
        assert len(r.round_trips_s) + r.round_trips_missed == 3 and r.round_trips_missed == 0
        assert r.renamed is not None and len(r.renamed.trips) == 3 and r.renamed.missed == r.renamed.incomplete == 0
        assert r.import_s is not None and r.import_error == ""
        assert r.mount is not None and r.tool == "python"
    assert [r.peer for r in reports] == ["n1", "n0"]
    holder, other = sorted(reports, key=lambda r: r.rank)
    # Rank 0 made the large directory, the other node listed every file of it.
    assert holder.large_dir is not None and holder.large_dir.writer and holder.large_dir.files == 300
    assert other.large_dir is not None and other.large_dir.listed == 300 and other.large_dir.list_s > 0
    assert holder.lock is not None and holder.lock.holder
    assert other.lock is not None and other.lock.kept_out and other.lock.taken_after
    # flock beside lockf: each kind kept the other node out while held, then let it take it.
    assert holder.flock is not None and holder.flock.holder and holder.flock.kind == "flock"
    assert other.flock is not None and other.flock.kept_out and other.flock.taken_after
    # What each node made of its own is gone; the barriers and the lock file stay for the login
    # node, which removes the directory.
    assert sorted(p.name for p in (tmp_path / "job").iterdir() if not p.name.startswith(".barrier")) == [
        "flock",
        "lock",
    ]


def test_a_renamed_file_seen_short_under_its_new_name_is_counted_apart(tmp_path, monkeypatch):
    whole = coherence._publish_renamed

    def half_of_each_ping(path, data):
        whole(path, data[: len(data) // 2] if path.name.startswith("ping-") else data)

    # One node answers its own pings (its neighbour in a ring of one).
    assert coherence.ping_pong(tmp_path, 0, 1, 3, 5.0, renamed=True).trips != ()
    monkeypatch.setattr(coherence, "_publish_renamed", half_of_each_ping)
    short = coherence.ping_pong(tmp_path, 0, 1, 3, 5.0, renamed=True)
    assert short == coherence.RoundTrips((), missed=0, incomplete=3)
    assert list(tmp_path.iterdir()) == []  # its files, temporary names included, are removed


def test_a_neighbour_that_leaves_the_barrier_late_is_waited_for_untimed(tmp_path):
    # node1 starts its ping-pong 0.6 s after node0, as a node leaves a barrier on a slow
    # filesystem late: node0's first exchange waits for it and is not timed, so every timed try
    # is the files' way between them, not the skew.
    def late(rank: int) -> coherence.RoundTrips:
        time.sleep(0.6 * rank)
        return coherence.ping_pong(tmp_path, rank, 2, 3, 5.0)

    with ThreadPoolExecutor(2) as pool:
        early, later = pool.map(late, range(2))
    for node in (early, later):
        assert len(node.trips) == 3 and node.missed == 0 and node.incomplete == 0, node
    assert max(early.trips) < 0.3, early.trips
    assert list(tmp_path.iterdir()) == []


def test_a_node_whose_streams_take_longer_than_the_usual_wait_is_waited_for(tmp_path):
    (tmp_path / "job").mkdir()
    config = dataclasses.replace(SMALL, import_module="", large_dir_files=50)
    with ProcessPoolExecutor(2) as pool:
        reports = list(pool.map(slow_second_node, range(2), [2] * 2, [str(tmp_path)] * 2, ["job"] * 2, [config] * 2))
    for r in reports:
        assert r.barrier_timeout is None and r.errors == ()
        assert r.metadata_files == 50 and len(r.round_trips_s) == 3
        assert r.lock is not None and r.lock.error == "" and r.large_dir is not None and r.large_dir.error == ""
        assert r.stream is not None and r.stream.verified


def test_a_node_that_never_comes_is_given_up_on_before_the_jobs_limit_naming_it(tmp_path):
    (tmp_path / "job").mkdir()
    hosts = ("n0", "n1")
    ctx = TaskContext("1", 0, 0, 0, 2, 2, "n0", hosts, "n0", 29500)
    start = time.monotonic()
    r = measure_node(ctx, root_template=str(tmp_path), name="job", config=SMALL, timeout_s=30, limit_s=3)
    assert time.monotonic() - start < 3
    assert r.barrier_timeout is not None and r.barrier_timeout.barrier == "start"
    assert r.barrier_timeout.missing == (1,) and r.barrier_timeout.nodes == ("n1",)
    assert str(r.barrier_timeout) == "start: rank(s) [1] missing after 3 s"


def test_direct_false_measures_through_the_dropped_page_cache(tmp_path):
    (tmp_path / "job").mkdir()
    r = node(0, 1, str(tmp_path), "job", dataclasses.replace(SMALL, direct=False))
    assert r.stream is not None and r.stream.mode == BUFFERED and r.stream.verified


def test_no_stream_where_not_even_the_least_size_fits_its_share_of_free_space(tmp_path):
    free = os.statvfs(tmp_path).f_bavail * os.statvfs(tmp_path).f_frsize
    # A share of free space that holds one least-sized stream file, not the two this node runs.
    share = 1.5 * MIN_STREAM_BYTES / free
    tight = StorageConfig(block_bytes=2**20, max_free_share=share, import_module="", large_dir_files=0)
    (tmp_path / "job").mkdir()
    r = node(0, 1, str(tmp_path), "job", tight)
    assert r.stream is None and r.short_of_space and "2 stream(s) × 256 MiB, the least that measures" in r.not_measured
    assert not list((tmp_path / "job").glob("stream-*"))


def test_nothing_is_written_where_the_jobs_files_would_take_too_many_free_inodes(tmp_path, monkeypatch):
    real = os.statvfs

    def few_inodes(path):
        got = real(path)
        return os.statvfs_result((*got[:5], 10_000, 600, 600, *got[8:]))  # f_files, f_ffree, f_favail

    monkeypatch.setattr(storage.os, "statvfs", few_inodes)
    (tmp_path / "job").mkdir()
    # One node: 2 streams, 50 metadata files, 3 tries and the first exchange (no large directory
    # on one node): over 10 % of 600.
    config = dataclasses.replace(SMALL, import_module="")
    needed = storage.inodes_needed(config, streams=2, world=1)
    assert 60 < needed < 300
    assert storage.inodes_needed(config, streams=2, world=2) == 2 * needed + 301  # the large directory
    r = node(0, 1, str(tmp_path), "job", config)
    assert r.short_of_inodes and r.free_inodes == 600 and r.stream is None and r.metadata_files == 0
    assert r.not_measured.startswith(f"{needed} files and folders the job makes would take more than 10% of the 600")
    assert r.not_measured.endswith(": nothing written") and r.large_dir is None and r.lock is None
    assert [p.name for p in (tmp_path / "job").iterdir()] == [".barrier-start-0"]


def test_inodes_are_not_counted_where_the_filesystem_counts_none():
    config = StorageConfig(max_free_share=0.1)
    needed = storage.inodes_needed(config, streams=8, world=64)
    # 10 timed tries and the untimed first exchange, each a ping and a pong, written and renamed
    assert needed == 64 * (8 + 2000 + 2 + 44 + 2 + storage.LOCK_FILES + len(storage.BARRIERS)) + 100_001
    assert storage.short_of_inodes(config.max_free_share, needed, favail=10 * needed - 1, files=10**9)
    assert not storage.short_of_inodes(config.max_free_share, needed, favail=10 * needed, files=10**9)
    assert not storage.short_of_inodes(config.max_free_share, needed, favail=0, files=0)  # btrfs, some FUSE: no count


def test_stream_files_shrink_to_the_share_of_free_space_down_to_the_least_size():
    config = StorageConfig(file_bytes=4 * 2**30, block_bytes=16 * 2**20, max_free_share=0.1)
    # 63.9 GiB free (the one-H200 machine's disk), 2 nodes × 1 stream: 3.19 GiB each, whole blocks.
    free = int(63.9 * 2**30)
    assert stream_bytes(config, 2, free) == (int(0.1 * free) // 2) // (16 * 2**20) * (16 * 2**20)
    assert stream_bytes(config, 2, 10 * 2**40) == 4 * 2**30  # room enough: the profile's size
    assert stream_bytes(config, 64, free) == 0  # under 256 MiB each: not measured
    small = StorageConfig(file_bytes=64 * 2**20, block_bytes=2**20)
    assert stream_bytes(small, 2, free) == 64 * 2**20  # a profile asking for less than the floor gets it


def test_mount_facts_name_the_longest_mount_and_its_options():
    nfs = mount_facts("/mnt/shared/.pytest-gpucluster/alice/storage-x", MOUNTINFO)
    assert nfs is not None and nfs.describe() == "nfs4 10.0.0.5:/export at /mnt/shared"
    assert {"vers=4.2", "nconnect=16", "proto=tcp", "relatime"} <= set(nfs.options)
    spaced = mount_facts("/mnt/shared/with space/f", MOUNTINFO)
    assert spaced is not None and spaced.fstype == "tmpfs" and spaced.mount_point == "/mnt/shared/with space"


@pytest.mark.parametrize(
    ("key", "value", "says"),
    [
        ("block_bytes", 1000, "multiple of 4096"),
        ("file_bytes", 4096, "at least block_bytes"),
        ("max_free_share", 0.9, "max_free_share"),
        ("import_module", "torch; import os", "dotted module name"),
        ("engine", "elbencho", "engine must be one of auto, fio, python"),
        ("streams_per_node", -1, "streams_per_node and large_dir_files"),
        ("checkpoint_layers", -2, "checkpoint_layers must be 0"),
    ],
)
def test_settings_out_of_range_are_refused_naming_the_key(key, value, says):
    with pytest.raises(ValueError, match=says):
        StorageConfig(**{key: value})


def _profile_file(tmp_path: Path, table: str) -> Path:
    path = tmp_path / "thresholds.toml"
    path.write_text(
        (REPO / "thresholds.toml").read_text() + f'\n[profiles.x]\nexecutor = "local"\n[profiles.x.storage]\n{table}\n'
    )
    return path


def test_a_profiles_storage_table_sets_sizes_as_written(tmp_path):
    storage = load(_profile_file(tmp_path, 'file_bytes = "64MiB"\nmetadata_files = 10')).profiles["x"].storage
    assert storage.file_bytes == 64 * 2**20 and storage.metadata_files == 10 and storage.block_bytes == 16 * 2**20
    ci = load(REPO / "thresholds.toml").profiles["ci"].storage
    assert ci.file_bytes == 128 * 2**20 and ci.large_dir_files == 2000 and ci.streams_per_node == 0
    assert ci.checkpoint and ci.checkpoint_ranks_per_node == 1


@pytest.mark.parametrize(
    ("table", "says"),
    [
        ("file_byte = 1", r"\[?profiles.x.storage.file_byte: unknown key. Perhaps you meant 'file_bytes'\?"),
        ('block_bytes = "1000B"', "profiles.x.storage: block_bytes must be a positive multiple of 4096"),
        ('import_module = "os; x"', "profiles.x.storage: import_module must be a dotted module name"),
    ],
)
def test_a_bad_storage_key_is_refused_naming_it(tmp_path, table, says):
    with pytest.raises(ConfigError, match=says):
        load(_profile_file(tmp_path, table))

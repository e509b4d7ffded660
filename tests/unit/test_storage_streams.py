"""A node's streams, one per GPU: fio's JSON as Debian's fio 3.33 printed it for four streams
(write, verified read, and a read whose crc32c check failed), the arguments fio is started with,
and both engines on this machine's disk, with O_DIRECT and through the dropped page cache."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from pytest_gpucluster.checks import storage as checks
from pytest_gpucluster.workloads.storage import StorageReport
from pytest_gpucluster.workloads.storage_streams import (
    BUFFERED,
    DIRECT,
    fio_argv,
    measure_streams,
    parse_fio,
    streams_from_fio,
)

DATA = Path(__file__).resolve().parents[1] / "data" / "storage"
MiB = 2**20


def recorded(name: str, way: str):
    return parse_fio((DATA / f"fio-3.33-{name}.json").read_text(), way)


def test_fios_json_gives_each_jobs_bytes_seconds_and_error():
    writes = recorded("write-4jobs", "write")
    assert [w.io_bytes for w in writes] == [64 * MiB] * 4
    assert all(w.error == 0 and 0 < w.runtime_s < 10 for w in writes)
    reads = recorded("read-4jobs", "read")
    assert [r.io_bytes for r in reads] == [64 * MiB] * 4 and all(r.error == 0 for r in reads)


def test_fio_streams_have_the_python_streams_shape_and_the_node_lasts_its_longest_job():
    writes, reads = recorded("write-4jobs", "write"), recorded("read-4jobs", "read")
    streams = streams_from_fio(writes, reads, 4 * MiB, DIRECT)
    assert streams.tool == "fio" and streams.mode == DIRECT and streams.verified and len(streams.each) == 4
    assert streams.size_bytes == 256 * MiB and streams.block_bytes == 4 * MiB
    assert streams.write_s == max(w.runtime_s for w in writes)
    assert streams.write_mb_s == pytest.approx(256 * MiB / 1e6 / streams.write_s)
    assert min(s.write_mb_s for s in streams.each) >= streams.write_mb_s / 4


def test_a_block_whose_checksum_failed_on_the_read_leaves_its_stream_unverified():
    text = (DATA / "fio-3.33-read-4jobs-verify-failed.json").read_text()
    assert text.startswith("fio: pid=")  # fio's error line comes before the document
    reads = parse_fio(text, "read")
    assert [r.error for r in reads] == [0, 0, 84, 0]
    streams = streams_from_fio(recorded("write-4jobs", "write"), reads, 4 * MiB, DIRECT)
    assert [s.verified for s in streams.each] == [True, True, False, True] and not streams.verified
    report = StorageReport("node1", 0, "/mnt/shared/x", stream=streams)
    (found,) = checks.not_measured([report], ["node1"])
    assert found.culprits == ("node1",) and "not those it wrote" in found.text


def test_fio_is_started_with_an_argument_list_and_the_write_alone_fsyncs():
    write = fio_argv(
        "/usr/bin/fio", way="write", prefix="stream-3", streams=8, size_bytes=MiB, block_bytes=MiB, direct=True
    )
    read = fio_argv(
        "/usr/bin/fio", way="read", prefix="stream-3", streams=8, size_bytes=MiB, block_bytes=MiB, direct=False
    )
    assert write[0] == "/usr/bin/fio" and "--numjobs=8" in write and "--filename_format=stream-3.$jobnum" in write
    assert "--direct=1" in write and "--end_fsync=1" in write and "--output-format=json" in write
    assert "--direct=0" in read and "--end_fsync=1" not in read and "--verify=crc32c" in read


ENGINES = ["python", pytest.param("fio", marks=pytest.mark.skipif(not shutil.which("fio"), reason="no fio here"))]


@pytest.mark.parametrize("engine", ENGINES)
def test_three_streams_at_once_are_verified_and_their_files_removed(tmp_path, engine):
    streams = measure_streams(tmp_path, 0, streams=3, size_bytes=4 * MiB, block_bytes=MiB, direct=True, engine=engine)
    assert streams.tool == engine and len(streams.each) == 3 and streams.verified
    assert streams.mode in (DIRECT, BUFFERED) and all(s.write_mb_s > 0 and s.read_mb_s > 0 for s in streams.each)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("engine", ENGINES)
def test_direct_false_streams_through_the_dropped_page_cache(tmp_path, engine):
    streams = measure_streams(tmp_path, 1, streams=2, size_bytes=MiB, block_bytes=MiB, direct=False, engine=engine)
    assert streams.mode == BUFFERED and streams.verified and streams.tool == engine
    assert list(tmp_path.iterdir()) == []

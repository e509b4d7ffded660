"""The report's storage section (report/storage.py, html.storage_block) and the handover sheet's
storage line, from the details the storage checks record: per node its streams' throughput and
spread, the aggregate, visibility, the large directory, the checkpoint with its slowest rank;
escaping; nothing at all where storage was not measured."""

from __future__ import annotations

from result_docs import document, record_of_test

from pytest_gpucluster.checks import storage as storage_checks
from pytest_gpucluster.checks import storage_checkpoint
from pytest_gpucluster.report import html, storage
from pytest_gpucluster.results import codec
from pytest_gpucluster.workloads.storage import DIRECT, MountFacts, StorageReport, Stream, Streams
from pytest_gpucluster.workloads.storage_checkpoint import CheckpointRank
from pytest_gpucluster.workloads.storage_coherence import LargeDirectory, RoundTrips

GB = 10**9
NFS = MountFacts("/mnt/shared", "nfs4", "10.0.0.5:/export", ("vers=4.2",))
EVIL = "<img src=x onerror=alert(1)>"


def node(name: str, rank: int, mb_s: tuple[float, ...], **more) -> StorageReport:
    each = tuple(Stream(DIRECT, 4 * GB, 2**24, 4000 / v, 2000 / v, True) for v in mb_s)
    streams = Streams("fio", DIRECT, each, max(s.write_s for s in each), max(s.read_s for s in each))
    return StorageReport(
        name, rank, "/mnt/shared/u/storage-x", tool="fio", mount=NFS, stream=streams, round_trips_s=(0.002, 0.004),
        peer="node2" if rank == 0 else "node1", metadata_files=10, metadata_s=(0.1, 0.1, 0.1), **more,
    )  # fmt: skip


def rank(name: str, r: int, gpu: int, write_s: float) -> CheckpointRank:
    return CheckpointRank(
        name, r, f"gpu{gpu}", 4, total_bytes=8 * GB, bytes_written=2 * GB, write_s=write_s, save_s=2.0,
        bytes_read=2 * GB, read_s=1.0, restore_s=1.5, tensors=100,
    )  # fmt: skip


REPORTS = [
    node("node1", 0, (1000.0, 1100.0), large_dir=LargeDirectory(True, 100_000, 40.0)),
    node("node2", 1, (900.0, 1000.0), large_dir=LargeDirectory(False, listed=100_000, list_s=1.5)),
]
RANKS = [rank("node1", 0, 0, 1.0), rank("node1", 1, 1, 1.2), rank("node2", 2, 0, 1.9), rank("node2", 3, 1, 1.1)]


def doc_with(reports=REPORTS, ranks=RANKS, note="d 2048, 16 layers, vocab 32000, AdamW") -> dict:
    tests = [
        record_of_test("t.py::test_write_and_read_throughput", "pass", storage=storage_checks.section(reports)),
        record_of_test(
            "t.py::test_checkpoint_restores_bit_for_bit", "pass", storage=storage_checkpoint.section(ranks, note)
        ),
    ]
    return codec.with_verdicts(document(tests, nodes=("node1", "node2")))


def test_the_section_gives_each_nodes_streams_the_aggregate_and_the_checkpoints_slowest_rank():
    view = storage.view(doc_with())
    assert view is not None
    assert (
        view.summary.startswith("2 node(s) at once: write ") and "nfs4 10.0.0.5:/export at /mnt/shared" in view.summary
    )
    one, two = view.rows
    assert two.node == "node2" and two.write.endswith(" MB/s")
    assert (one.node, one.streams) == ("node1", "2 × fio, O_DIRECT")
    assert one.per_stream == "write 1000–1100, read 2000–2200 MB/s" and one.round_trips.startswith("median 3 ms")
    assert view.large_dir == "100000 files made by node1 in 40 s; node2 listed 100000 in 1.5 s"
    assert view.visibility.startswith("4 round trips between neighbour nodes: median 3 ms")
    ckpt = view.checkpoint
    assert ckpt is not None and "slowest rank node2:gpu0 (1.9 s of its own I/O)" in ckpt.save
    assert ckpt.save.startswith("8 GB in 2 s: 4 GB/s") and ckpt.bit_for_bit.startswith("every one of 4 ranks")
    # The slowest of the save (node2:gpu0) and of the restore (all alike: the first) are marked.
    assert [r.place for r in ckpt.rows if r.slowest] == ["node1:gpu0", "node2:gpu0"]


def test_the_handover_sheet_has_the_storage_line():
    line = storage.sheet_line(doc_with())
    assert "in aggregate" in line and "checkpoint save 4 GB/s, restore 5.333 GB/s in aggregate" in line
    assert "slowest rank node2:gpu0" in line
    doc = doc_with()
    block = html.acceptance_block(doc, codec.decode_recorded(doc))
    assert 'id="gc-sheet-storage"' in block and "checkpoint save 4 GB/s" in block


def test_the_section_draws_each_nodes_bars_and_says_the_cold_import_and_renamed_files():
    reports = [
        node("node1", 0, (1000.0, 1100.0), import_s=2.0, import_module="torch", renamed=RoundTrips((0.003, 0.005))),
        node("node2", 1, (900.0,), import_s=3.5, import_module="torch", renamed=RoundTrips((0.004,), incomplete=1)),
        StorageReport("node3", 2, "/mnt/shared/u/storage-x", mount=NFS, import_s=2.5, import_module="torch"),
    ]
    doc = doc_with(reports)
    view = storage.view(doc)
    assert view is not None
    # node3 measured no stream: no bar; node2's single stream wrote 900 MB/s.
    assert [b.node for b in view.bars] == ["node1", "node2"] and view.bars[1].write == 900.0
    assert view.cold_import == "import torch on 3 node(s) at once: median 2.5 s, slowest node2 3.5 s"
    assert [r.cold_import for r in view.rows] == ["2 s", "3.5 s", "2.5 s"]
    assert view.renamed == (
        "3 round trips of files renamed into place, each read whole: median 4 ms, 90th percentile 5 ms, max 5 ms; "
        "1 seen short, 0 never answered"
    )
    block = html.storage_block(doc)
    assert 'id="gc-storage-bars"' in block and 'src="data:image/svg+xml;base64,' in block
    assert 'id="gc-storage-cold-import"' in block and 'id="gc-storage-renamed"' in block
    assert "cold import torch on 3 node(s) at once: median 2.5 s, slowest node2 3.5 s" in storage.sheet_line(doc)


def test_a_rank_whose_bits_differ_is_named_and_the_block_escapes_what_it_shows():
    wrong = [*RANKS[:3], CheckpointRank(**{**RANKS[3].__dict__, "mismatches": 2})]
    bad_mount = MountFacts("/mnt/shared", "nfs4", EVIL, ())
    reports = [StorageReport(**{**REPORTS[0].__dict__, "mount": bad_mount}), REPORTS[1]]
    doc = doc_with(reports, wrong, note=EVIL)
    view = storage.view(doc)
    assert view is not None and view.checkpoint is not None
    assert view.checkpoint.bit_for_bit == "restored bits differ on node2:gpu1"
    block = html.storage_block(doc)
    assert 'id="gc-storage-checkpoint"' in block and EVIL not in block and "&lt;img" in block


def test_nothing_where_storage_was_not_measured():
    doc = document([record_of_test("t.py::test_x", "pass")])
    assert storage.view(doc) is None and storage.sheet_line(doc) == "" and html.storage_block(doc) == ""


def test_past_the_chart_limit_the_slowest_nodes_are_drawn_in_node_order():
    bars = [storage.Bar(f"node{i:04d}", 2000.0, 1900.0) for i in range(1, 1001)]
    bars[499] = storage.Bar("node0500", 300.0, 1900.0)  # slow writes
    bars[9] = storage.Bar("node0010", None, None)  # measured nothing: drawn last, if at all
    drawn, title = storage.chart_bars(bars, 48)
    assert len(drawn) == 48 and "node0500" in [b.node for b in drawn]
    assert [b.node for b in drawn] == sorted(b.node for b in drawn)
    assert title == "the 48 slowest of 1000 nodes' write and read, every node at once"
    assert storage.chart_bars(bars[:3], 48) == (tuple(bars[:3]), "each node's write and read, every node at once")

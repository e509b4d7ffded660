"""The checkpoint from every GPU: the workload itself on this machine's disk (two gloo ranks as two
nodes save and restore a sharded model and optimizer with torch.distributed.checkpoint, bit for
bit, and leave no file behind; the free-space and free-inode guards write nothing), the bit comparison on real
tensors, and the judging: a rank whose bits differ fails its node naming rank and GPU, every GPU
slow alike is the shared filesystem's, one slow GPU is its node's, an unset line warns."""

from __future__ import annotations

import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from pathlib import Path

import pytest

from pytest_gpucluster.checks import storage_checkpoint as checks
from pytest_gpucluster.config import Threshold, ThresholdSet
from pytest_gpucluster.workloads.context import TaskContext, master_port_for
from pytest_gpucluster.workloads.storage_checkpoint import (
    CheckpointRank,
    bits,
    fitting,
    inodes_needed,
    mismatched,
    save_and_restore,
    state_bytes,
)
from pytest_gpucluster.workloads.training import TINY

torch = pytest.importorskip("torch")
HOSTS = ("n0", "n1")


def rank(r: int, root: str, port: int, max_free_share: float, free_inodes: int | None = None) -> CheckpointRank:
    if free_inodes is not None:  # the filesystem as one nearly out of inodes reports it
        real = os.statvfs

        def few(path: str) -> os.statvfs_result:
            got = real(path)
            return os.statvfs_result((*got[:5], 10_000, free_inodes, free_inodes, *got[8:]))

        os.statvfs = few  # this spawned process's own
    ctx = TaskContext("1", r, 0, r, 2, 2, HOSTS[r], HOSTS, "127.0.0.1", port)
    model = TINY.model
    return save_and_restore(
        ctx, root_template=root, name="job", model=model, max_free_share=max_free_share, backend="gloo", timeout_s=60
    )


def run_ranks(root: Path, max_free_share: float = 0.1, free_inodes: int | None = None) -> list[CheckpointRank]:
    (root / "job").mkdir()
    port = master_port_for(str(os.getpid() + len(str(root))))
    # Spawned, not forked: a fork of a process whose torch already ran threaded ops (an earlier
    # test on this worker) inherits a broken thread pool, and its first parallel op never returns.
    with ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("spawn")) as pool:
        return list(pool.map(rank, range(2), [str(root)] * 2, [port] * 2, [max_free_share] * 2, [free_inodes] * 2))


def test_two_ranks_save_and_restore_their_shards_bit_for_bit_and_remove_the_files(tmp_path):
    ranks = run_ranks(tmp_path)
    assert [(r.node, r.rank, r.gpu) for r in ranks] == [("n0", 0, "cpu0"), ("n1", 1, "cpu0")]
    for r in ranks:
        assert r.measured and r.mismatches == 0 and r.tensors > 10, r
        assert r.bytes_written > 0 and r.bytes_read > 0 and 0 < r.write_s <= r.save_s and 0 < r.read_s <= r.restore_s
    # Each rank wrote its own shard: together the whole state (which both ranks summed alike) and
    # torch.save's framing of each tensor.
    assert ranks[0].total_bytes == ranks[1].total_bytes
    assert ranks[0].total_bytes <= sum(r.bytes_written for r in ranks) < 1.2 * ranks[0].total_bytes
    assert not any((tmp_path / "job").rglob("*")), "every file of the checkpoint is removed"
    section = checks.section(ranks)["checkpoint"]
    assert section["bit_for_bit"] and section["save"]["slowest"] in ("n0:cpu0", "n1:cpu0")


def test_a_checkpoint_too_large_for_the_free_space_is_not_written(tmp_path):
    ranks = run_ranks(tmp_path, max_free_share=1e-15)
    assert all(r.short_of_space and not r.measured and r.bytes_written == 0 for r in ranks)
    assert "would take more than" in ranks[0].not_measured
    (found,) = checks.restored_bits(ranks, HOSTS)
    assert found.scope == "shared_fs" and found.severity == "not_judged"
    assert not any((tmp_path / "job").rglob("*"))


def test_a_checkpoint_whose_files_would_take_too_many_free_inodes_is_not_written(tmp_path):
    # Two ranks' files, the metadata and two folders: 5 inodes, more than 10 % of 40.
    assert inodes_needed(2) == 5
    ranks = run_ranks(tmp_path, free_inodes=40)
    assert all(r.short_of_inodes and not r.short_of_space and not r.measured and r.bytes_written == 0 for r in ranks)
    assert all(r.free_inodes == 40 for r in ranks)
    said = "the checkpoint's 5 files and folders would take more than 10% of the 40 inodes free on "
    assert ranks[0].not_measured == said + str(tmp_path / "job" / "checkpoint")
    (found,) = checks.restored_bits(ranks, HOSTS)
    assert found.scope == "shared_fs" and found.severity == "not_judged" and "40 inodes free" in found.text
    assert not any((tmp_path / "job").rglob("*"))
    # 50 free: 5 is 10 %, within the share; written.
    (tmp_path / "more").mkdir()
    assert all(r.measured for r in run_ranks(tmp_path / "more", free_inodes=50))


def test_the_estimate_is_the_state_a_run_saves_and_a_small_share_keeps_fewer_blocks(tmp_path):
    full = state_bytes(TINY.model)
    free = os.statvfs(tmp_path).f_bavail * os.statvfs(tmp_path).f_frsize
    # A share that holds the model with one block of its two, not both.
    one = state_bytes(replace(TINY.model, n_layers=1))
    ranks = run_ranks(tmp_path, max_free_share=(one + full) / 2 / free)
    assert all(r.measured and r.mismatches == 0 for r in ranks)
    assert (ranks[0].layers, ranks[0].layers_asked) == (1, 2)
    # What was saved is the estimate, plus AdamW's step counters (one 4-byte scalar per tensor).
    assert one <= ranks[0].total_bytes < one * 1.01
    (aggregate,) = [m for m in checks.rates(ranks, ThresholdSet("t", {}), "1").unjudged if "aggregate" in m.metric][:1]
    assert "1 of the model's 2 blocks, what the share of free space holds" in aggregate.detail


def test_a_model_fits_by_its_blocks_or_not_at_all():
    from pytest_gpucluster.workloads.training import TrainConfig

    model = TrainConfig().model  # the training check's: 10.51 GiB of state, measured on an H200
    assert round(state_bytes(model) / 2**30, 2) == 10.51
    assert fitting(model, 0.1 * 63.9 * 2**30).n_layers == 8  # the H200 machine's free space
    assert fitting(model, 2**40) == model
    assert fitting(model, 2**20) is None


def test_bits_compare_bits_not_values():
    saved = {"a": bits(torch.tensor([float("nan"), 1.0])), "b": bits(torch.tensor(0.0)), "c": bits(torch.ones(3))}
    same = {"a": bits(torch.tensor([float("nan"), 1.0])), "b": bits(torch.tensor(0.0)), "c": bits(torch.ones(3))}
    assert mismatched(saved, same) == []  # NaN is its own bits
    flipped = torch.ones(3)
    flipped.view(torch.int32)[1] ^= 1  # the lowest mantissa bit
    other = {"a": same["a"], "b": bits(torch.tensor(-0.0)), "c": bits(flipped)}
    assert mismatched(saved, other) == ["b", "c"]  # -0.0 == 0.0 as values, not as bits
    assert mismatched(saved, {"a": same["a"]}) == ["b", "c"]


def measured_rank(node: str, r: int, gpu: int, save_gb_s: float, restore_gb_s: float, **more) -> CheckpointRank:
    size = 2 * 10**9
    return CheckpointRank(
        node,
        r,
        f"gpu{gpu}",
        4,
        path="/mnt/shared/u/storage-x/checkpoint",
        total_bytes=4 * size,
        bytes_written=size,
        write_s=size / 1e9 / save_gb_s,
        save_s=2.5,
        bytes_read=size,
        read_s=size / 1e9 / restore_gb_s,
        restore_s=2.0,
        tensors=100,
        **more,
    )


RANKS = [measured_rank(n, 2 * i + g, g, 2.0, 3.0) for i, n in enumerate(("node1", "node2")) for g in (0, 1)]


def lines(fail_below: float | None = 1.0, aggregate: bool = True) -> ThresholdSet:
    values = {}
    for way in ("save", "restore"):
        if fail_below is not None:
            values[f"storage.checkpoint_{way}_per_gpu"] = Threshold(
                f"storage.checkpoint_{way}_per_gpu", "GB/s", fail_below=fail_below, source="the site's contract"
            )
        if aggregate:
            values[f"storage.checkpoint_{way}_aggregate"] = Threshold(
                f"storage.checkpoint_{way}_aggregate", "GB/s", fail_below=2.0, source="the site's contract"
            )
    return ThresholdSet("site", values)


def test_every_rank_restored_bit_for_bit_finds_nothing():
    assert checks.restored_bits(RANKS, ("node1", "node2")) == []


def test_a_rank_whose_bits_differ_fails_its_node_naming_rank_and_gpu():
    wrong = replace(RANKS[3], mismatches=2, mismatched=("optim.state.head.weight.exp_avg", "model.head.weight"))
    (found,) = checks.restored_bits([*RANKS[:3], wrong], ("node1", "node2"))
    assert (found.scope, found.culprits, found.gpu, found.severity) == ("gpu", ("node2",), 1, "fail")
    assert found.text.startswith("rank 3 (node2:gpu1): 2 of 100 tensors differ (optim.state.head.weight.exp_avg")


def test_every_rank_of_every_node_wrong_alike_is_the_shared_filesystems():
    wrong = [replace(r, mismatches=1, mismatched=("model.tok.weight",)) for r in RANKS]
    (found,) = checks.restored_bits(wrong, ("node1", "node2"))
    assert found.scope == "shared_fs" and found.culprits == () and found.severity == "fail"


def test_a_node_without_a_result_is_named():
    (found,) = checks.restored_bits(RANKS[:2], ("node1", "node2"))
    assert found.culprits == ("node2",) and "sent no result" in found.text


def test_rates_meet_the_lines_and_the_whole_is_judged_over_the_collectives_seconds():
    judged = checks.rates(RANKS, lines(), "7")
    assert judged.findings == () and judged.unjudged == ()
    by_metric = {}
    for v in judged.verdicts:
        by_metric.setdefault(v.measurement.metric, []).append(v.measurement.value)
    assert by_metric["storage.checkpoint_save_per_gpu"] == pytest.approx([2.0] * 4)
    assert by_metric["storage.checkpoint_save_aggregate"] == pytest.approx([8 / 2.5])
    assert by_metric["storage.checkpoint_restore_aggregate"] == pytest.approx([8 / 2.0])


def test_one_slow_gpu_is_its_nodes_and_named_the_slowest():
    slow = [*RANKS[:2], replace(RANKS[2], write_s=4.0), RANKS[3]]  # 0.5 GB/s
    judged = checks.rates(slow, lines(), "7")
    (found,) = [f for f in judged.findings if f.severity == "fail"]
    assert (found.scope, found.culprits, found.gpu) == ("gpu", ("node2",), 0)
    assert checks.section(slow)["checkpoint"]["save"]["slowest"] == "node2:gpu0"


def test_every_gpu_slow_alike_is_the_shared_filesystems_and_convicts_no_node():
    judged = checks.rates(RANKS, lines(fail_below=5.0), "7")
    (found,) = [f for f in judged.findings if f.severity == "fail" and "save" in f.text]
    assert found.scope == "shared_fs" and found.convicts == ()
    assert "every GPU saves its checkpoint shard past the line alike" in found.text


def test_an_unset_line_warns_and_keeps_the_value_unjudged():
    judged = checks.rates(RANKS, lines(fail_below=None, aggregate=False), "7")
    assert judged.verdicts == ()
    assert {m.metric for m in judged.unjudged} == {
        f"storage.checkpoint_{w}_{k}" for w in ("save", "restore") for k in ("per_gpu", "aggregate")
    }
    assert {f.scope for f in judged.findings} == {"config"} and all(f.severity == "warn" for f in judged.findings)

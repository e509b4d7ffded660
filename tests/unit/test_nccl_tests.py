"""Parsing nccl-tests 2.x output (text table and -J JSON).

The files under tests/data/nccl_tests_*_representative_sample.* were written in the exact format of
nccl-tests 2.19 (src/util.cu) with representative H100 numbers; they were not captured from a run.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_gpucluster.workloads.busbw import busbw_gbps
from pytest_gpucluster.workloads.nccl_tests import nccl_tests_argv, nccl_version_string, parse_json, parse_text

DATA = Path(__file__).resolve().parents[1] / "data"
GiB, MiB = 2**30, 2**20


def _read(name: str) -> str:
    return (DATA / name).read_text()


def test_all_reduce_table():
    run = parse_text(_read("nccl_tests_all_reduce_perf_8xH100_representative_sample.txt"))
    assert run.op == "all_reduce"
    assert (run.n_ranks, run.hosts[0], run.warmup_iters, run.iters) == (8, "gpu-node-07", 5, 20)
    assert (run.version, run.nccl_version) == ("2.19.6", "2.28.9")
    assert run.out_of_bounds == 0
    assert run.errors == ()
    assert len(run.rows) == 28  # 14 sizes × out-of-place and in-place
    one_gib = [r for r in run.rows if r.size_bytes == GiB]
    oop, ip = one_gib
    assert (oop.in_place, ip.in_place) == (False, True)
    assert (oop.count, oop.time_us, oop.algbw, oop.busbw, oop.wrong) == (268435456, 5165.95, 207.85, 363.74, 0)
    # the table's busbw is nccl-tests' arithmetic on its own time column
    assert busbw_gbps("all_reduce", 8, GiB, oop.time_us * 1e-6) == pytest.approx(oop.busbw, abs=0.01)
    assert run.avg_busbw == pytest.approx(sum(r.busbw for r in run.rows) / len(run.rows), abs=0.01)


def test_json_gives_the_same_rows_as_the_table():
    text = parse_text(_read("nccl_tests_all_reduce_perf_8xH100_representative_sample.txt"))
    doc = parse_json(_read("nccl_tests_all_reduce_perf_8xH100_representative_sample.json"))
    assert doc.op == "all_reduce"
    assert (doc.n_ranks, doc.iters, doc.nccl_version, doc.out_of_bounds) == (8, 20, "2.28.9", 0)
    assert [(r.size_bytes, r.in_place, r.busbw, r.wrong) for r in doc.rows] == [
        (r.size_bytes, r.in_place, r.busbw, r.wrong) for r in text.rows
    ]


def test_two_node_all_gather_counts_every_rank_and_host():
    run = parse_text(_read("nccl_tests_all_gather_perf_2x8xH100_representative_sample.txt"))
    assert run.op == "all_gather"
    assert run.n_ranks == 16
    assert sorted(set(run.hosts)) == ["gpu-node-07", "gpu-node-08"]
    top = run.rows[-1]
    assert top.size_bytes == 8 * GiB
    assert top.count == 8 * GiB // 4 // 16  # the count column is per rank for all_gather
    sweep = run.to_sweep("gpu-node-07+gpu-node-08", "all_gather")
    assert sweep.correct
    assert sweep.judged_row(GiB).size_bytes == GiB  # busbw grows with size: the smallest judged size


def test_wrong_elements_make_the_sweep_wrong():
    run = parse_text(_read("nccl_tests_reduce_scatter_perf_wrong_representative_sample.txt"))
    assert run.out_of_bounds == 1
    sweep = run.to_sweep("gpu-node-07", "reduce_scatter")
    assert not sweep.correct
    (problem,) = sweep.correctness_problems()
    assert "8 MiB in-place: 1024 wrong elements" in problem


def test_a_run_that_died_is_an_error_with_its_last_line():
    run = parse_text(_read("nccl_tests_all_reduce_perf_died_representative_sample.txt"))
    assert run.out_of_bounds is None
    assert len(run.rows) == 10  # five sizes made it
    assert "Test NCCL failure" in run.errors[0]
    sweep = run.to_sweep("gpu-node-07", "all_reduce", ["/opt/nccl-tests/build/all_reduce_perf", "-b", "1M"])
    assert not sweep.correct
    assert "no footer: the run ended early" in sweep.error
    assert sweep.implementation == "all_reduce_perf"


def test_unchecked_rows_and_in_place_only_rows():
    text = "\n".join(
        [
            "# Collective test starting: broadcast_perf",
            "     1048576        262144     float    none       0    20.00   52.43   52.43    N/A",
            "     2097152        524288     float    none       0    30.00   69.91   69.91    N/A"
            "    29.00   72.32   72.32    N/A",
            "# Out of bounds values : 0 OK",
            "# Avg bus bandwidth    : 64.8",
        ]
    )
    run = parse_text(text)
    assert run.op == "broadcast"
    assert [(r.size_bytes, r.in_place, r.wrong) for r in run.rows] == [
        (MiB, True, -1),
        (2 * MiB, False, -1),
        (2 * MiB, True, -1),
    ]
    assert not run.to_sweep("n1", "broadcast").correct  # -c 0: a bandwidth nobody checked


def test_empty_output_is_not_a_pass():
    sweep = parse_text("").to_sweep("n1", "all_reduce")
    assert not sweep.correct
    assert sweep.correctness_problems()


def test_argv_is_a_list_with_the_sweep_flags():
    argv = nccl_tests_argv(
        "/opt/nccl-tests/build/all_reduce_perf", min_bytes=MiB, max_bytes=8 * GiB, warmup_iters=5, iters=20, gpus=8
    )
    assert argv == [
        "/opt/nccl-tests/build/all_reduce_perf",
        "-b",
        "1048576",
        "-e",
        "8589934592",
        "-f",
        "2",
        "-g",
        "8",
        "-w",
        "5",
        "-n",
        "20",
        "-c",
        "1",
        "-a",
        "3",
    ]


@pytest.mark.parametrize(("code", "text"), [(22809, "2.28.9"), (21903, "2.19.3"), (2708, "2.7.8")])
def test_nccl_version_codes(code, text):
    assert nccl_version_string(code) == text

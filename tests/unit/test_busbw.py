"""nccl-tests arithmetic, sweep planning and the judged value of a sweep."""

from __future__ import annotations

import math

import pytest

from pytest_gpucluster.checks.nccl import measurement_of
from pytest_gpucluster.config import Threshold
from pytest_gpucluster.verdict import judge
from pytest_gpucluster.workloads.busbw import (
    GLOO_MAX_BYTES,
    SizeResult,
    SweepResult,
    algbw_gbps,
    bus_factor,
    busbw_gbps,
    plan_sizes,
    shape_for,
    sweep_sizes,
)

GiB, MiB = 2**30, 2**20


@pytest.mark.parametrize(
    ("op", "n", "factor"),
    [
        ("all_reduce", 8, 1.75),  # 2·7/8
        ("all_reduce", 4, 1.5),
        ("all_reduce", 2, 1.0),
        ("all_reduce", 16, 1.875),
        ("all_gather", 8, 0.875),
        ("reduce_scatter", 4, 0.75),
        ("alltoall", 2, 0.5),
        ("broadcast", 8, 1.0),
        ("all_reduce", 1, 0.0),
    ],
)
def test_bus_factor_matches_nccl_tests(op, n, factor):
    assert bus_factor(op, n) == pytest.approx(factor)


def test_bandwidths_by_hand():
    # 1 GiB all_reduce on 8 GPUs in 5165.95 µs (a row of nccl-tests' table): 207.85 / 363.74 GB/s
    seconds = 5165.95e-6
    assert algbw_gbps(GiB, seconds) == pytest.approx(207.85, abs=0.01)
    assert busbw_gbps("all_reduce", 8, GiB, seconds) == pytest.approx(363.74, abs=0.01)
    # 1e9 bytes in one second is 1 GB/s: GB is 1e9, not 2^30
    assert algbw_gbps(10**9, 1.0) == 1.0
    assert busbw_gbps("all_gather", 4, 10**9, 1.0) == 0.75
    assert math.isnan(algbw_gbps(GiB, 0.0))


def test_unknown_collective_is_refused():
    with pytest.raises(ValueError, match="unknown collective 'allreduce'"):
        bus_factor("allreduce", 8)


def test_shapes_round_like_nccl_tests():
    # all_reduce: every element; all_gather/reduce_scatter/alltoall: per-rank count down to 16 B
    assert shape_for("all_reduce", 3, 1000) == shape_for("all_reduce", 3, 1000)
    ar = shape_for("all_reduce", 3, 1000)
    assert (ar.count, ar.size_bytes) == (250, 1000)
    ag = shape_for("all_gather", 3, 1000)  # 250 elements / 3 = 83 → 80 per rank → 960 B buffer
    assert (ag.count, ag.size_bytes, ag.total_elements) == (80, 960, 240)
    rs = shape_for("reduce_scatter", 8, GiB)
    assert (rs.count, rs.size_bytes) == (GiB // 4 // 8, GiB)
    assert shape_for("alltoall", 64, 1024).count == 4
    assert shape_for("alltoall", 128, 1024).count == 0  # too small to give every rank 16 bytes


def test_sweep_sizes_double_from_min_to_max():
    assert sweep_sizes(MiB, 8 * MiB) == [MiB, 2 * MiB, 4 * MiB, 8 * MiB]
    assert sweep_sizes(MiB, 8 * GiB)[-1] == 8 * GiB
    assert len(sweep_sizes(MiB, 8 * GiB)) == 14
    assert sweep_sizes(3, 20) == [3, 6, 12]  # the last step may stop short of max, as with -f 2
    assert sweep_sizes(64, 64) == [64]
    with pytest.raises(ValueError):
        sweep_sizes(0, 64)
    with pytest.raises(ValueError):
        sweep_sizes(128, 64)


def test_gloo_sweep_is_clamped_and_says_so():
    plan = plan_sizes(MiB, 8 * GiB, "gloo")
    assert max(plan.sizes) == GLOO_MAX_BYTES == 4 * MiB
    assert plan.sizes == (MiB, 2 * MiB, 4 * MiB)
    assert "clamped from 1 MiB..8 GiB to 1 MiB..4 MiB" in plan.note
    # a minimum above the clamp still gives one size
    assert plan_sizes(64 * MiB, 8 * GiB, "gloo").sizes == (4 * MiB,)
    # small CPU sweeps and every NCCL sweep run as the profile says, with no note
    assert plan_sizes(64 * 1024, 4 * MiB, "gloo") == plan_sizes(64 * 1024, 4 * MiB, "nccl")
    assert plan_sizes(64 * 1024, 4 * MiB, "gloo").note == ""
    assert max(plan_sizes(MiB, 8 * GiB, "nccl").sizes) == 8 * GiB


def _row(size: int, busbw: float, in_place: bool = False, wrong: int = 0) -> SizeResult:
    return SizeResult(
        size_bytes=size, count=size // 4, in_place=in_place, time_us=1.0, algbw=busbw / 1.75, busbw=busbw, wrong=wrong
    )


def _sweep(rows, **kw) -> SweepResult:
    base = dict(
        op="all_reduce",
        nodes=("node3",),
        n_ranks=8,
        backend="nccl",
        implementation="all_reduce",
        rows=tuple(rows),
        warmup_iters=5,
        iters=20,
    )
    return SweepResult(**{**base, **kw})


def test_judged_value_is_the_minimum_at_large_sizes_not_the_average():
    sweep = _sweep(
        [
            _row(256 * MiB, 340.0),
            _row(GiB, 362.0),
            _row(GiB, 360.0, in_place=True),
            _row(2 * GiB, 351.0),
            _row(4 * GiB, 366.0),
        ]
    )
    row = sweep.judged_row(GiB)
    assert (row.size_bytes, row.busbw, row.in_place) == (2 * GiB, 351.0, False)
    # below judge_from the sweep is not judged at all, even where it is lower
    assert sweep.judged_row(GiB).busbw > 340.0
    # a sweep that stopped below judge_from is judged at its largest size
    assert sweep.judged_row(8 * GiB).size_bytes == 4 * GiB
    assert _sweep([]).judged_row(GiB) is None


def test_series_points_keep_the_better_placement_of_each_size():
    sweep = _sweep([_row(MiB, 10.0), _row(MiB, 12.0, in_place=True), _row(2 * MiB, 20.0)])
    assert sweep.series_points() == [[float(MiB), 12.0], [float(2 * MiB), 20.0]]


H100_AR = Threshold(
    metric="nccl.all_reduce.intra_node",
    unit="GB/s",
    fail_below=330.0,
    warn_below=355.0,
    source="thresholds.toml [thresholds.h100.nccl.all_reduce.intra_node]",
)


@pytest.mark.parametrize(
    ("value", "status"), [(366.0, "pass"), (355.0, "pass"), (351.0, "warn"), (330.0, "warn"), (301.5, "fail")]
)
def test_verdict_with_warn_band(value, status):
    sweep = _sweep([_row(GiB, 999.0), _row(2 * GiB, value)])
    m = measurement_of(sweep, "nccl.all_reduce.intra_node", GiB)
    assert judge(m, H100_AR).status == status


def test_failure_sentence_states_value_unit_size_bound_and_node():
    sweep = _sweep([_row(GiB, 362.0), _row(2 * GiB, 301.5), _row(4 * GiB, 364.0)])
    sentence = judge(measurement_of(sweep, "nccl.all_reduce.intra_node", GiB), H100_AR).sentence
    assert sentence.startswith("node3: nccl.all_reduce.intra_node")
    for part in ("301.5 GB/s", "at 2 GiB out-of-place", "min busbw over sizes ≥ 1 GiB", "fail < 330 GB/s", "8 ranks"):
        assert part in sentence, sentence


def test_retry_detail_names_earlier_attempts():
    first = _sweep([_row(GiB, 300.0)])
    second = _sweep([_row(GiB, 360.0)])
    m = measurement_of(second, "nccl.all_reduce.intra_node", GiB, attempts=[first, second])
    assert m.value == 360.0
    assert "attempt 2 (earlier: 300 GB/s)" in m.detail


def test_wrong_result_is_a_problem_whatever_its_speed():
    sweep = _sweep([_row(GiB, 999.0), _row(2 * GiB, 999.0, in_place=True, wrong=12)], wrong_places=("node3:gpu5",))
    assert not sweep.correct
    (problem,) = sweep.correctness_problems()
    assert "2 GiB in-place: 12 wrong elements" in problem
    assert "node3:gpu5" in problem
    unchecked = _sweep([_row(GiB, 999.0, wrong=-1)])
    assert not unchecked.correct
    assert "not checked" in unchecked.correctness_problems()[0]
    assert _sweep([]).correctness_problems() == ["node3: all_reduce: the sweep produced no row"]


def test_where_names_few_nodes_and_counts_many():
    assert _sweep([], nodes=("a", "b")).where == "a+b"
    many = tuple(f"n{i:02d}" for i in range(16))
    assert _sweep([], nodes=many).where == "16 nodes (n00..n15)"

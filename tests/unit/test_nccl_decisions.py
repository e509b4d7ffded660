"""The decisions taken on a judged collective: re-measure a slow one up to ``retries`` times, never
a wrong one; narrow a miss across nodes down by pairs only when its results are right."""

from __future__ import annotations

import dataclasses

import pytest

from pytest_gpucluster.checks.nccl import make_check, needs_isolation, needs_retry, pair_passes
from pytest_gpucluster.config import NcclSettings, Threshold
from pytest_gpucluster.workloads.busbw import SizeResult, SweepResult

GiB = 2**30
LINE = Threshold("nccl.all_reduce.inter_node", "GB/s", fail_below=100.0)


def _check(busbw: float, *, wrong: int = 0, threshold: Threshold | None = LINE):
    row = SizeResult(size_bytes=GiB, count=GiB // 4, in_place=False, time_us=1.0, algbw=1.0, busbw=busbw, wrong=wrong)
    sweep = SweepResult(
        op="all_reduce",
        nodes=("node1", "node2"),
        n_ranks=4,
        backend="nccl",
        implementation="all_reduce",
        rows=(row,),
        warmup_iters=2,
        iters=5,
    )
    return make_check(sweep, "nccl.all_reduce.inter_node", threshold, NcclSettings())


@pytest.mark.parametrize(("attempts", "again"), [(1, True), (2, True), (3, False)])
def test_a_slow_result_is_measured_again_up_to_the_retries(attempts, again):
    assert needs_retry(_check(50.0), attempts, retries=2) is again


def test_a_wrong_result_or_a_pass_is_never_measured_again():
    assert not needs_retry(_check(50.0, wrong=3), 1, retries=2)
    assert not needs_retry(_check(150.0), 1, retries=2)
    assert not needs_retry(_check(50.0, threshold=None), 1, retries=2)  # no line: nothing to miss


def test_only_a_slow_right_result_is_narrowed_down_and_a_pair_passes_when_right_and_fast():
    assert needs_isolation(_check(50.0)) and not needs_isolation(_check(50.0, wrong=1))
    assert pair_passes(_check(150.0)) and not pair_passes(_check(50.0)) and not pair_passes(_check(150.0, wrong=1))


def test_a_check_is_judged_once_however_many_decisions_read_it(monkeypatch):
    from pytest_gpucluster.checks import nccl

    calls = []
    real = nccl.judge
    monkeypatch.setattr(nccl, "judge", lambda m, t: calls.append(m) or real(m, t))
    check = _check(50.0)
    assert needs_retry(check, 3, retries=2) is False and needs_isolation(check) and not pair_passes(check)
    assert len(calls) == 1
    # A check made again (the next attempt) is judged again.
    assert needs_isolation(dataclasses.replace(check)) and len(calls) == 2

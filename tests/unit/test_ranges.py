from __future__ import annotations

from pytest_gpucluster.verdict.ranges import runs, spans


def test_runs_of_consecutive_numbers():
    assert runs([5, 0, 1, 2, 3, 3]) == [(0, 3), (5, 5)]
    assert runs([]) == []


def test_spans_as_each_list_prints_them():
    assert spans([0, 1, 2, 3, 5]) == ["0–3", "5"]
    assert spans([3, 11, 12], dash="-", width=2) == ["03", "11-12"]
    assert spans([4, 5, 7, 8, 9], pair_as_two=True) == ["4,5", "7–9"]

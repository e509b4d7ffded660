"""The runner without a session: a value is produced once for every reader, a failure is shown in
full to its first reader and in one line to the others, early starts run together and the wait
for them is bounded."""

from __future__ import annotations

import threading
import time

import pytest

from pytest_gpucluster.errors import GpuClusterError, LaunchError
from pytest_gpucluster.run import Runner, Start
from pytest_gpucluster.run.runner import RunningTest, SharedFailure


def _runner(limit_s: float = 5.0) -> tuple[Runner, list[tuple[str, dict]]]:
    """A runner whose running test keeps what is recorded on it (as pytest's user_properties)."""
    runner = Runner(limit_s=limit_s)
    properties: list[tuple[str, dict]] = []
    runner.test = RunningTest("t.py::test_t", "test_t", properties, "gpucluster")
    return runner, properties


def test_a_value_is_produced_once_and_its_jobs_reach_every_reader():
    runner, recorded = _runner()
    calls = []

    def produce():
        calls.append(1)
        runner.record({"kind": "job", "job_id": "7"})
        runner.record({"kind": "series", "name": "busbw"})
        return 42

    assert runner.once("k", produce, reader="a") == 42
    assert runner.once("k", produce, reader="b") == 42
    assert calls == [1]
    # The first reader gets everything recorded; a later one only the jobs it does not hold yet.
    assert [entry for _, entry in recorded] == [
        {"kind": "job", "job_id": "7"},
        {"kind": "series", "name": "busbw"},
        {"kind": "job", "job_id": "7"},
    ]


def test_a_failure_is_whole_for_its_first_reader_and_one_line_for_the_others():
    runner, _ = _runner()

    def produce():
        raise LaunchError("job 7 (x-probe): submission refused: node2 offers 4 GPU(s)\nlogs: /a, /b")

    with pytest.raises(LaunchError):
        runner.once("k", produce, reader="t.py::test_a")
    with pytest.raises(SharedFailure) as later:
        runner.once("k", produce, reader="t.py::test_b")
    assert str(later.value) == (
        "job 7 (x-probe): submission refused: node2 offers 4 GPU(s) "
        "(the same failure as in t.py::test_a, which shows it in full)"
    )
    assert isinstance(later.value, GpuClusterError)  # fallbacks still catch it


def test_early_starts_run_together_and_the_wait_for_them_is_bounded():
    runner, _ = _runner(limit_s=0.5)
    both = threading.Barrier(2, timeout=2)
    release = threading.Event()
    seen: list[str] = []

    def start(session, tag):
        both.wait()  # only passes when the two starts run at the same time
        seen.append(f"{tag}:{runner.ahead_label}:{runner.light}")
        release.wait(5)

    labels = runner.start_ahead(None, [Start("a", start, {"tag": "x"}), Start("b", start, {"tag": "y"})])
    assert labels == ["a[x]", "b[y]"]
    t0 = time.monotonic()
    still = runner.await_ahead()
    assert still == ["a[x]", "b[y]"] and time.monotonic() - t0 < 2
    release.set()
    assert sorted(seen) == ["x:a[x]:True", "y:b[y]:True"]

"""Jobs that wait for each other are waited on together: the first to fail cancels the others at
once, and its error (the cause) is the one raised, not the others' "cancelled"."""

from __future__ import annotations

import threading
import time

import pytest

from pytest_gpucluster.errors import LaunchError, QueueTimeoutError
from pytest_gpucluster.run.context import JobContext


class _Held:
    """A job that runs until cancelled (as one waiting at its hold for a partner would)."""

    def __init__(self) -> None:
        self.cancelled = threading.Event()

    def results(self):
        if not self.cancelled.wait(30):
            return ["ran"]
        raise LaunchError("job 1 (pair-a): ended CANCELLED")

    def cancel(self) -> None:
        self.cancelled.set()


class _Queued:
    """A job that never left the queue."""

    def __init__(self, after_s: float) -> None:
        self.after_s = after_s

    def results(self):
        time.sleep(self.after_s)
        raise QueueTimeoutError("job 2 (pair-b): still PENDING after 60 s: Resources; cancelled.")

    def cancel(self) -> None:
        pass


class _Done:
    def __init__(self, value: str) -> None:
        self.value = value

    def results(self):
        return [self.value]

    def cancel(self) -> None:
        raise AssertionError("a finished pair is not cancelled")


def test_the_first_failure_cancels_its_partner_and_is_the_error_raised():
    held = _Held()
    t0 = time.monotonic()
    with pytest.raises(QueueTimeoutError, match=r"job 2 .*still PENDING"):
        JobContext.results_together(held, _Queued(0.2))
    assert held.cancelled.is_set()
    assert time.monotonic() - t0 < 5  # not the partner's own 30 s


def test_jobs_that_both_end_give_both_results():
    assert JobContext.results_together(_Done("a"), _Done("b")) == [["a"], ["b"]]

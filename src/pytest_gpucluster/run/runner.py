"""The runner: measures each value once for every test that reads it, and starts ahead, together,
the light jobs the plan says may go before the first test (``plan.Plan.ahead``).

A value is produced by the first test (or early start) that asks for it, under ``once``; every
other reader waits for it, bounded. A failure is kept as well, so each reader reports it. What a
producer records (its jobs, its data) goes to the value and reaches the tests that read it. An
early start runs on a thread pool; a job that is not light waits until every early start has
ended, so a measurement never shares the nodes with them.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Hashable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_all
from dataclasses import dataclass, field
from typing import Any, TypeVar

from pytest_gpucluster.errors import ClusterFault, GpuClusterError

R = TypeVar("R")


@dataclass(frozen=True)
class Start:
    """One early start: the producer to call with the session, and the test parameters it takes."""

    key: str
    fn: Callable[..., Any]
    kwargs: Mapping[str, Any] = field(default_factory=dict)

    @property
    def label(self) -> str:
        return self.key + (f"[{'-'.join(str(v) for v in self.kwargs.values())}]" if self.kwargs else "")


class SharedFailure(GpuClusterError):
    """A reader of a value whose production failed in an earlier test: says where it failed first
    and what failed; the session reports it in that one line, without a second traceback. It is a
    GpuClusterError as the failure it repeats, so a caller with a fallback still catches it;
    ``original`` is that failure, whose fields say whose fault it was."""

    def __init__(self, message: str, original: BaseException | None = None) -> None:
        super().__init__(message)
        self.original = original


@dataclass(frozen=True)
class RunningTest:
    """The test the main thread runs, as the session hands it to the runner: its id and name, and
    the list its recorded entries go on (``properties``, as ``(key, entry)`` pairs: pytest's
    ``user_properties``)."""

    nodeid: str
    name: str
    properties: list[tuple[str, Any]]
    key: str

    def record(self, entry: dict[str, Any]) -> None:
        """``entry`` on the test."""
        self.properties.append((self.key, entry))

    def jobs(self) -> list[dict[str, Any]]:
        """The job entries the test holds already."""
        return [v for k, v in self.properties if k == self.key and isinstance(v, dict) and v.get("kind") == "job"]


class _Slot:
    """One ``once`` value: produced by one thread, waited for by the others."""

    def __init__(self) -> None:
        self.done = threading.Event()
        self.ok = False
        self.value: Any = None
        self.entries: list[dict[str, Any]] = []  # recorded while it was produced
        self.claimed = False  # a reader took everything recorded
        self.first_reader: str | None = None


class Runner:
    """Once-values and early starts for one run. ``record`` attaches an entry to whatever the
    calling thread is working for; ``limit_s`` bounds every wait for another thread's value.
    ``test``: the test the main thread runs (the session sets it), None between tests."""

    def __init__(self, *, limit_s: float) -> None:
        self.limit_s = limit_s
        self.test: RunningTest | None = None
        self._cache: dict[Hashable, _Slot] = {}
        self._lock = threading.Lock()
        self._local = threading.local()  # per thread: record sink, early-start label, light depth
        self._pool: ThreadPoolExecutor | None = None
        self._ahead: list[tuple[str, Future[Any]]] = []

    # ------------------------------------------------------------------ thread context

    @property
    def sink(self) -> list[dict[str, Any]] | None:
        return getattr(self._local, "sink", None)

    @property
    def ahead_label(self) -> str | None:
        """The early start this thread runs, if any."""
        return getattr(self._local, "ahead", None)

    @property
    def light(self) -> bool:
        """Whether this thread is producing a light value (its jobs may run beside early ones)."""
        return bool(getattr(self._local, "light", 0))

    def record(self, entry: dict[str, Any]) -> None:
        """To the value being produced on this thread, else to the running test."""
        sink = self.sink
        if sink is not None:
            sink.append(entry)
        elif self.test is not None:
            self.test.record(entry)

    # ------------------------------------------------------------------ once

    def once(
        self,
        key: Hashable,
        produce: Callable[[], R],
        *,
        light: bool = False,
        reader: str | None = None,
        present: Callable[[], list[dict[str, Any]]] | None = None,
    ) -> R:
        """Measure once per run, judge many times. The first reader gets everything recorded while
        the value was produced, every other one its jobs (``present``: what the reader holds
        already). ``light``: the jobs ``produce`` submits measure no speed and may run beside the
        early starts. A failure reaches the first reader as it was raised; later readers get a
        one-line ``SharedFailure`` naming the first reader. The reader is the running test
        (``test``) unless ``reader`` and ``present`` name another."""
        test = self.test
        if reader is None and test is not None:
            reader, present = test.nodeid, present or test.jobs
        present = present or list
        with self._lock:
            slot = self._cache.get(key)
            mine = slot is None
            if slot is None:
                slot = self._cache[key] = _Slot()
        if mine:
            outer = self.sink
            self._local.sink = slot.entries
            self._local.light = getattr(self._local, "light", 0) + int(light)
            try:
                slot.value, slot.ok = produce(), True
            except BaseException as exc:  # every reader re-raises it, pytest's outcomes too
                slot.value, slot.ok = exc, False
            finally:
                self._local.sink = outer
                self._local.light -= int(light)
                slot.done.set()
        elif not slot.done.wait(self.limit_s):
            raise GpuClusterError(f"{key}: still being measured after {self.limit_s:.0f} s; gave up waiting")
        self._attach(slot, present)
        if not slot.ok:
            raise self._failure(slot, reader)
        return slot.value  # type: ignore[no-any-return]

    def _failure(self, slot: _Slot, reader: str | None) -> BaseException:
        exc: BaseException = slot.value
        if reader is None or self.sink is not None:
            return exc
        if slot.first_reader is None or slot.first_reader == reader:
            slot.first_reader = reader
            return exc
        if not isinstance(exc, (GpuClusterError, SharedFailure)):
            return exc  # pytest's own outcomes (fail, skip) and unexpected errors stay as they are
        if isinstance(exc, ClusterFault):
            return exc  # a fault outside the nodes stays itself: no reader judges a node on it
        text = str(exc).strip().splitlines()
        first = text[0] if text else type(exc).__name__
        return SharedFailure(f"{first} (the same failure as in {slot.first_reader}, which shows it in full)", exc)

    def _attach(self, slot: _Slot, present: Callable[[], list[dict[str, Any]]]) -> None:
        if self.sink is not None:  # an early start or a produce within a produce
            for entry in slot.entries:
                self.record(entry)
            return
        entries = slot.entries if not slot.claimed else [e for e in slot.entries if e.get("kind") == "job"]
        slot.claimed = True
        held = present()
        for entry in entries:
            if entry not in held:
                self.record(entry)

    # ------------------------------------------------------------------ early starts

    def start_ahead(self, session: Any, starts: list[Start]) -> list[str]:
        """Call every start on a pool of its own (its own thread each), so their jobs are submitted
        together; returns their labels."""
        if not starts:
            return []
        self._pool = ThreadPoolExecutor(max_workers=len(starts), thread_name_prefix="gpucluster-ahead")
        for start in starts:
            self._ahead.append((start.label, self._pool.submit(self._run_ahead, session, start)))
        return [label for label, _ in self._ahead]

    def _run_ahead(self, session: Any, start: Start) -> None:
        self._local.sink = []  # nothing lands on whatever test the main thread is running
        self._local.ahead = start.label
        self._local.light = 1
        with contextlib.suppress(BaseException):  # the test that needs it meets the same error
            start.fn(session, **start.kwargs)

    def await_ahead(self) -> list[str]:
        """Wait (bounded by ``limit_s``) until every early start has ended; the labels of those
        still running when the bound passed (the run goes on without waiting for them)."""
        if not self._ahead:
            return []
        ahead, self._ahead = self._ahead, []
        _, still = wait_all([future for _, future in ahead], timeout=self.limit_s)
        if self._pool is not None:
            self._pool.shutdown(wait=False)
        return [label for label, future in ahead if future in still]  # in the order they started

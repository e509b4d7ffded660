"""Xid events on the node, from the two sources an unprivileged job can have (``checks.xid`` judges
them on the login node):

- **NVML's event API**, inside every task of the run that was given GPUs: ``XidWatcher`` registers
  every GPU the task can open for ``nvmlEventTypeXidCriticalError`` and waits on the event set in
  short slices on a background thread, from the workload's start to its end
  (``launch/node.py``). NVML needs no privilege for a GPU the task can open; it sees only the
  Xids that occur while it waits.
- **The kernel log** (``/dev/kmsg``), read once per node after every other job of the run
  (``read_kernel_log``): the driver's ``NVRM: Xid`` lines since boot, as far back as the ring
  buffer holds them, with their time since boot. With ``kernel.dmesg_restrict = 1`` only root
  (CAP_SYSLOG) may open it; the reading then says why it is not readable.

GPUs are named by their PCI address (``0000:18:00``, as the kernel writes it) and by their index
in PCI bus order among all of the node's GPUs (``/proc/driver/nvidia/gpus``, readable inside any
job), which is the order NVML and nvidia-smi number them in and so the ``gpuN`` of the other
checks; under device cgroups NVML's own index inside a job is the job's, not the node's.

Everything here is plain data or runs on the node; pynvml is imported inside the functions.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import re
import threading
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from pytest_gpucluster.workloads.context import TaskContext

KMSG = "/dev/kmsg"
XID_MARK = "NVRM: Xid"  # the driver's prefix of every Xid line (NVSwitch's "SXid" lines do not match)
NVML_XID_EVENT = 0x8  # nvmlEventTypeXidCriticalError in nvml.h
NVML_ERROR_TIMEOUT = 10
WAIT_SLICE_MS = 100  # one nvmlEventSetWait_v2: the longest a stop waits for the watching thread
MAX_EVENTS = 200  # per task; a GPU that storms Xids is named long before this
MAX_LINES = 2000  # Xid lines kept per node from the kernel log (the newest)

_PCI = re.compile(r"(?:PCI:)?(?:([0-9a-fA-F]{1,8}):)?([0-9a-fA-F]{2}):([0-9a-fA-F]{2})(?:\.[0-7])?")


def pci_key(text: str) -> str:
    """A PCI address as the kernel's Xid lines write it, ``0000:18:00`` (domain, bus, device;
    lower case, no function), from NVML's ``00000000:18:00.0``, ``/proc``'s ``0000:18:00.0`` or
    the kernel's ``PCI:0000:18:00``; ``text`` itself, stripped, when it is none of these."""
    m = _PCI.fullmatch(text.strip())
    if m is None:
        return text.strip()
    domain, bus, device = m.groups()
    return f"{int(domain or '0', 16):04x}:{bus.lower()}:{device.lower()}"


def node_gpus(proc_root: str | Path = "/proc") -> tuple[str, ...]:
    """The node's GPUs by PCI address (``pci_key``), in PCI bus order: position N is ``gpuN``.
    Empty where the driver's /proc directory is absent or unreadable."""
    try:
        entries = [p.name for p in (Path(proc_root) / "driver" / "nvidia" / "gpus").iterdir()]
    except OSError:
        return ()
    return tuple(sorted(pci_key(e) for e in entries))


def node_of(ctx: TaskContext) -> str:
    """The scheduler's name for the task's node (what the tests are parametrised by)."""
    return ctx.hostnames[ctx.node_rank] if 0 <= ctx.node_rank < len(ctx.hostnames) else ctx.hostname


# --------------------------------------------------------------------------- NVML events


@dataclass(frozen=True)
class WatchedGpu:
    """A GPU a task registered for Xid events: its PCI address and its ``gpuN`` index (None when
    neither /proc nor NVML gave one)."""

    bus: str
    index: int | None


@dataclass(frozen=True)
class XidEvent:
    """One Xid NVML delivered: the GPU (None when the event names no device the task registered),
    the Xid, and when the wait returned with it (epoch seconds)."""

    gpu: WatchedGpu | None
    xid: int
    epoch: float


@dataclass(frozen=True)
class XidWatch:
    """What one task's watch saw, sent back with the task's result. ``gpus``: what it watched
    (empty: nothing, and ``error`` says why); ``notes``: GPUs it could not register and waits
    that failed; ``started``/``ended``: the watched span (epoch seconds)."""

    node: str
    job_id: str
    rank: int
    gpus: tuple[WatchedGpu, ...] = ()
    events: tuple[XidEvent, ...] = ()
    started: float = 0.0
    ended: float = 0.0
    error: str = ""
    notes: tuple[str, ...] = ()
    dropped: int = 0  # events past MAX_EVENTS, counted, not kept


def handle_address(handle: Any) -> int | None:
    """The address an NVML device handle points at: the key an event's ``device`` is matched by."""
    try:
        return ctypes.cast(handle, ctypes.c_void_p).value
    except (TypeError, ctypes.ArgumentError):
        return None


def event_of(data: Any, gpus: Mapping[int | None, WatchedGpu], epoch: float) -> XidEvent | None:
    """An ``nvmlEventData_t`` (device, eventType, eventData, gpuInstanceId, computeInstanceId) as
    an ``XidEvent``: the device handle is looked up among the registered ones (``gpus``, by
    ``handle_address``), ``eventData`` is the Xid. None for an event that is not an Xid."""
    if not int(data.eventType) & NVML_XID_EVENT:
        return None
    address = handle_address(data.device)
    return XidEvent(gpus.get(address) if address else None, int(data.eventData), epoch)


class EventSource(Protocol):
    """Where a watcher's events come from (``NvmlEvents`` on a node)."""

    def open(self) -> tuple[tuple[WatchedGpu, ...], tuple[str, ...]]:
        """Register what can be watched: (the GPUs, sentences on those that could not be)."""

    def wait(self, timeout_ms: int) -> XidEvent | None:
        """The next event, or None when ``timeout_ms`` passed without one."""

    def close(self) -> None:
        """Release what ``open`` took."""


class NvmlEvents:
    """NVML's event API over every GPU this process can open (``nvmlEventSetCreate``,
    ``nvmlDeviceRegisterEvents`` for Xid critical errors, ``nvmlEventSetWait_v2``)."""

    def __init__(self, proc_root: str | Path = "/proc") -> None:
        self._proc_root = proc_root
        self._set: Any = None
        self._gpus: dict[int | None, WatchedGpu] = {}

    def open(self) -> tuple[tuple[WatchedGpu, ...], tuple[str, ...]]:
        import pynvml

        pynvml.nvmlInit()
        self._set = pynvml.nvmlEventSetCreate()
        order = {bus: i for i, bus in enumerate(node_gpus(self._proc_root))}
        notes: list[str] = []
        for i in range(int(pynvml.nvmlDeviceGetCount())):
            try:
                handle = pynvml.nvmlDeviceGetHandleByIndex(i)
                bus = pci_key(_text(pynvml.nvmlDeviceGetPciInfo(handle).busId))
                pynvml.nvmlDeviceRegisterEvents(handle, pynvml.nvmlEventTypeXidCriticalError, self._set)
            except pynvml.NVMLError as exc:
                # Under device cgroups a job may count the node's GPUs but open only its own.
                if exc.value != pynvml.NVML_ERROR_NO_PERMISSION:
                    notes.append(f"NVML device {i}: {exc}")
                continue
            self._gpus[handle_address(handle)] = WatchedGpu(bus, order.get(bus, i if not order else None))
        return tuple(self._gpus.values()), tuple(notes)

    def wait(self, timeout_ms: int) -> XidEvent | None:
        import pynvml

        try:
            data = pynvml.nvmlEventSetWait_v2(self._set, timeout_ms)
        except pynvml.NVMLError as exc:
            if exc.value == NVML_ERROR_TIMEOUT:
                return None
            raise
        return event_of(data, self._gpus, time.time())

    def close(self) -> None:
        import pynvml

        with contextlib.suppress(pynvml.NVMLError):
            if self._set is not None:
                pynvml.nvmlEventSetFree(self._set)
        with contextlib.suppress(pynvml.NVMLError):
            pynvml.nvmlShutdown()


class XidWatcher:
    """Watches Xid events on a background thread while a workload runs: ``start()`` before it,
    ``stop()`` after it. The thread waits on the source at most ``slice_ms`` at a time, so a stop
    returns within that (and ``grace_s`` more for a source still opening: NVML's start on a node
    without persistence mode); a source that fails to open or keeps failing is said in the
    watch's ``error``, never raised into the workload."""

    def __init__(
        self,
        node: str,
        job_id: str,
        rank: int,
        source: EventSource | None = None,
        *,
        slice_ms: int = WAIT_SLICE_MS,
        grace_s: float = 2.0,
    ) -> None:
        self.node, self.job_id, self.rank = node, job_id, rank
        self.source: EventSource = source if source is not None else NvmlEvents()
        self.slice_ms = slice_ms
        self.grace_s = grace_s
        self._events: list[XidEvent] = []
        self._gpus: tuple[WatchedGpu, ...] = ()
        self._notes: list[str] = []
        self._error = ""
        self._dropped = 0
        self._opened = False
        self._started = 0.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> XidWatcher:
        """Begin watching; returns self."""
        self._started = time.time()
        self._thread = threading.Thread(target=self._run, name="xid-watcher", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        try:
            self._gpus, notes = self.source.open()
        except Exception as exc:  # no library, no driver, no device: said, not raised
            self._error = f"NVML unavailable: {type(exc).__name__}: {exc}".rstrip(": ")
            with contextlib.suppress(Exception):
                self.source.close()
            return
        self._notes += notes
        self._opened = True
        if not self._gpus:
            self._error = "NVML opened no GPU here"
        try:
            failures = 0
            while self._gpus and not self._stop.is_set():
                try:
                    event = self.source.wait(self.slice_ms)
                except Exception as exc:  # a lost GPU, a driver reset: said, and bounded
                    failures += 1
                    if len(self._notes) < 8:
                        self._notes.append(f"waiting for NVML events failed: {type(exc).__name__}: {exc}")
                    if failures >= 3:
                        self._error = f"stopped watching after {failures} failed waits"
                        return
                    self._stop.wait(self.slice_ms / 1000)
                    continue
                failures = 0
                if event is None:
                    continue
                if len(self._events) < MAX_EVENTS:
                    self._events.append(event)
                else:
                    self._dropped += 1
        finally:
            with contextlib.suppress(Exception):
                self.source.close()

    def seen(self, since: float = 0.0) -> list[XidEvent]:
        """The events seen so far whose time is at or after ``since`` (epoch seconds), while the
        watch goes on: a long workload reads them as it goes."""
        return [e for e in list(self._events) if e.epoch >= since]

    def stop(self) -> XidWatch:
        """Stop watching (bounded wait for the thread) and say what was seen."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.slice_ms / 1000 + self.grace_s)
        ended = time.time()
        error = self._error
        if self._thread is not None and self._thread.is_alive() and not self._opened:
            error = f"NVML had not opened the GPUs {ended - self._started:.1f} s after the workload started"
        return XidWatch(
            node=self.node,
            job_id=self.job_id,
            rank=self.rank,
            gpus=self._gpus,
            events=tuple(self._events),
            started=self._started,
            ended=ended,
            error=error,
            notes=tuple(self._notes),
            dropped=self._dropped,
        )


# --------------------------------------------------------------------------- the kernel log


@dataclass(frozen=True)
class KernelLog:
    """One node's reading of its kernel log: ``lines`` are the ``NVRM: Xid`` messages as (seconds
    since boot, message), oldest first; ``gpus`` the node's GPUs in ``gpuN`` order (``node_gpus``);
    ``boot_epoch`` converts a line's time to epoch seconds. ``readable`` false: ``why`` says why."""

    node: str
    readable: bool
    why: str = ""
    lines: tuple[tuple[float, str], ...] = ()
    gpus: tuple[str, ...] = ()
    boot_epoch: float = 0.0
    read_at: float = 0.0
    overwritten: int = 0  # records the kernel overwrote while they were read
    truncated: bool = False  # the read stopped at its time bound or MAX_LINES


def kmsg_record(raw: str) -> tuple[float, str] | None:
    """One /dev/kmsg record, ``"4,1503,842391771,-;NVRM: Xid ..."`` (priority, sequence, time since
    boot in µs, flags; the message), as (seconds since boot, message); None for anything else (the
    record's continuation lines, which start with a space)."""
    head, sep, message = raw.partition(";")
    fields = head.split(",")
    if not sep or len(fields) < 4 or not fields[2].isdigit():
        return None
    return int(fields[2]) / 1e6, message.split("\n", 1)[0].rstrip()


def xid_lines(records: Iterable[str]) -> list[tuple[float, str]]:
    """The Xid lines among /dev/kmsg records, as (seconds since boot, message)."""
    out = []
    for raw in records:
        record = kmsg_record(raw)
        if record is not None and XID_MARK in record[1]:
            out.append(record)
    return out


def boot_epoch() -> float:
    """When the node booted, epoch seconds, on the clock the kernel log's timestamps follow: the
    unadjusted monotonic clock (NTP's corrections to CLOCK_MONOTONIC would drift from it by
    seconds over weeks of uptime)."""
    return time.time() - time.clock_gettime(time.CLOCK_MONOTONIC_RAW)


def _records(fd: int, deadline: float) -> Iterator[str]:
    """Every record /dev/kmsg still holds (one per read), until its end or ``deadline``."""
    while time.monotonic() < deadline:
        try:
            chunk = os.read(fd, 16384)
        except BlockingIOError:
            return  # the end of the buffer
        except BrokenPipeError:
            yield ""  # overwritten while read: the next read goes on from the oldest record left
            continue
        if not chunk:
            return
        yield chunk.decode("utf-8", "replace")


def _not_readable(path: str, exc: OSError, proc_root: str | Path) -> str:
    why = f"{path}: {exc.strerror or exc}"
    try:
        restrict = (Path(proc_root) / "sys" / "kernel" / "dmesg_restrict").read_text().strip()
    except OSError:
        return why
    if restrict == "1" and exc.errno in (1, 13):
        why += " (kernel.dmesg_restrict = 1: only root may read it)"
    return why


def read_kernel_log(
    ctx: TaskContext, *, kmsg: str = KMSG, proc_root: str | Path = "/proc", limit_s: float = 20.0
) -> KernelLog:
    """Workload: the node's ``NVRM: Xid`` kernel-log lines since boot (as far as the ring buffer
    reaches), read without blocking and within ``limit_s``, and the node's GPUs in ``gpuN``
    order. An unreadable log is a reading that says why, not an error."""
    node = node_of(ctx)
    gpus = node_gpus(proc_root)
    boot = boot_epoch()
    try:
        fd = os.open(kmsg, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as exc:
        return KernelLog(node, False, _not_readable(kmsg, exc, proc_root), gpus=gpus, boot_epoch=boot)
    lines: list[tuple[float, str]] = []
    overwritten = 0
    deadline = time.monotonic() + limit_s
    try:
        for raw in _records(fd, deadline):
            if not raw:
                overwritten += 1
            elif XID_MARK in raw:
                lines += xid_lines([raw])
    except OSError as exc:
        return KernelLog(node, False, _not_readable(kmsg, exc, proc_root), gpus=gpus, boot_epoch=boot)
    finally:
        os.close(fd)
    truncated = time.monotonic() >= deadline or len(lines) > MAX_LINES
    return KernelLog(
        node,
        True,
        lines=tuple(lines[-MAX_LINES:]),
        gpus=gpus,
        boot_epoch=boot,
        read_at=time.time(),
        overwritten=overwritten,
        truncated=truncated,
    )


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)

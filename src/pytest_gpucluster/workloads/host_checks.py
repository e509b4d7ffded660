"""Two things about a node's host that no GPU benchmark shows until a job is slow or its logs stop
lining up, measured in one task per node (docs/checks-node-config.md):

* **host memory bandwidth per NUMA node**: STREAM's Add kernel (``a = b + c``: two reads and one
  write per element, the triad's traffic) on each NUMA node in turn, one thread per CPU of that
  node the task holds, each pinned to its CPU and working on arrays it touched first (so the pages
  are the node's own). A socket with a missing or slow DIMM, or memory on the far socket, reads
  low against its peers. numpy's ``add`` releases the GIL, so the threads run at once.
* **the clock**: whether the kernel's clock is disciplined (``adjtimex``: ``STA_UNSYNC`` clear),
  the time daemon running, and the offset from the job's first node, measured as NTP does (four
  timestamps over TCP, the exchange with the shortest round trip kept), so no two clocks are
  compared through a shared file or the scheduler's whole seconds.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import itertools
import os
import socket
import statistics
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from pytest_gpucluster.workloads.context import TaskContext
from pytest_gpucluster.workloads.inventory import parse_cpulist

NODE_ROOT = Path("/sys/devices/system/node")
DAEMONS = ("chronyd", "ntpd", "systemd-timesyncd", "ptp4l", "phc2sys", "openntpd", "timemaster")
STA_UNSYNC = 0x0040  # <sys/timex.h>: the clock is not synchronized
TIME_ERROR = 5  # adjtimex's return value when the clock is not synchronized
_PACKET = struct.Struct("!dd")  # the first node's receive and send times, seconds
CLIENT_S = 5.0  # the longest the first node waits on one other node's exchange


@dataclass(frozen=True)
class NumaBandwidth:
    """One NUMA node's Add kernel: the best pass's rate over the CPUs the task held there."""

    numa_node: int
    cpus: int  # threads run, one per CPU of this NUMA node the task holds
    cpus_total: int  # CPUs of this NUMA node
    bytes_per_pass: int  # bytes read and written in one pass, all threads together
    gb_s: float  # the best pass
    gb_s_median: float
    passes: int


@dataclass(frozen=True)
class ClockReading:
    """The node's clock: the kernel's synchronization state, the time daemon, and the offset from
    the job's first node (None on that node, and where it was not measured: ``error`` says why)."""

    synced: bool | None  # None: adjtimex could not be read
    max_error_us: int | None  # the kernel's bound on the clock's error
    est_error_us: int | None
    daemons: tuple[str, ...]  # time daemons running on the node
    reference: str = ""  # the node the offset is measured against
    offset_ms: float | None = None  # this node's clock minus the reference's
    round_trip_ms: float | None = None  # the kept exchange's round trip: the offset's error is at most half
    error: str = ""


@dataclass(frozen=True)
class HostReport:
    """One node's host memory bandwidth per NUMA node and its clock."""

    node: str
    cpus_held: int  # CPUs the task may run on
    memory: tuple[NumaBandwidth, ...] = ()
    memory_error: str = ""
    clock: ClockReading | None = None


def numa_cpus(root: Path = NODE_ROOT) -> dict[int, list[int]]:
    """NUMA node → its CPUs; one node 0 with every CPU where the kernel shows no NUMA nodes."""
    found: dict[int, list[int]] = {}
    for d in sorted(root.glob("node[0-9]*")):
        with contextlib.suppress(OSError, ValueError):
            cpus = parse_cpulist((d / "cpulist").read_text())
            if cpus:
                found[int(d.name[4:])] = cpus
    return found or {0: sorted(os.sched_getaffinity(0))}


def add_kernel(cpus: list[int], array_bytes: int, passes: int, timeout_s: float = 60.0) -> tuple[float, float, int]:
    """STREAM's Add on ``cpus`` (a thread pinned to each), three arrays of ``array_bytes`` in all
    split among them: (best GB/s, median GB/s, bytes per pass). Each pass times from the moment
    every thread is ready to the moment the last one is done."""
    import numpy as np

    threads = len(cpus)
    per_thread = max(1, array_bytes // threads // 8)
    stamps: list[float] = []
    barrier = threading.Barrier(threads, action=lambda: stamps.append(time.perf_counter()), timeout=timeout_s)
    errors: list[BaseException] = []

    def work(cpu: int) -> None:
        try:
            os.sched_setaffinity(0, {cpu})  # this thread only
            a = np.zeros(per_thread)  # first touched here, so on this CPU's NUMA node
            b = np.ones(per_thread)
            c = np.full(per_thread, 2.0)
            np.add(b, c, out=a)  # warm: page tables, the first write
            for _ in range(passes):
                barrier.wait()
                np.add(b, c, out=a)
            barrier.wait()
        except BaseException as exc:  # reported by the caller; the others' barrier is broken
            errors.append(exc)
            barrier.abort()

    pool = [threading.Thread(target=work, args=(cpu,), daemon=True) for cpu in cpus]
    for t in pool:
        t.start()
    for t in pool:
        t.join(timeout_s)
    if errors:
        first = next((e for e in errors if not isinstance(e, threading.BrokenBarrierError)), errors[0])
        raise RuntimeError(f"Add kernel on CPUs {cpus[0]}-{cpus[-1]}: {type(first).__name__}: {first}") from first
    if any(t.is_alive() for t in pool) or len(stamps) != passes + 1:
        raise TimeoutError(f"Add kernel on CPUs {cpus[0]}-{cpus[-1]} did not finish within {timeout_s:g} s")
    moved = 3 * 8 * per_thread * threads
    rates = [moved / (t1 - t0) / 1e9 for t0, t1 in itertools.pairwise(stamps) if t1 > t0]
    return max(rates), statistics.median(rates), moved


def memory_bandwidth(array_bytes: int, passes: int, root: Path = NODE_ROOT) -> tuple[NumaBandwidth, ...]:
    """Each NUMA node in turn, over the CPUs of it the task holds (none held: not measured)."""
    held = os.sched_getaffinity(0)
    out: list[NumaBandwidth] = []
    for numa, cpus in numa_cpus(root).items():
        mine = [c for c in cpus if c in held]
        if not mine:
            continue
        best, median, moved = add_kernel(mine, array_bytes, passes)
        out.append(NumaBandwidth(numa, len(mine), len(cpus), moved, round(best, 3), round(median, 3), passes))
    return tuple(out)


class _Timex(ctypes.Structure):
    _fields_ = [
        ("modes", ctypes.c_uint),
        ("offset", ctypes.c_long),
        ("freq", ctypes.c_long),
        ("maxerror", ctypes.c_long),
        ("esterror", ctypes.c_long),
        ("status", ctypes.c_int),
        ("rest", ctypes.c_long * 32),  # the fields after status, and the kernel's padding
    ]


def kernel_clock() -> tuple[bool | None, int | None, int | None]:
    """(synchronized, max error µs, estimated error µs) from ``adjtimex`` with no change asked
    (modes 0: read only, no privilege needed); Nones where the call is not there."""
    name = ctypes.util.find_library("c")
    if name is None:
        return None, None, None
    try:
        libc = ctypes.CDLL(name, use_errno=True)
        t = _Timex()
        state = libc.adjtimex(ctypes.byref(t))
    except (OSError, AttributeError):
        return None, None, None
    if state < 0:
        return None, None, None
    synced = state != TIME_ERROR and not t.status & STA_UNSYNC
    return synced, int(t.maxerror), int(t.esterror)


def time_daemons(proc: Path = Path("/proc")) -> tuple[str, ...]:
    """The time daemons running on the node, by their process names."""
    found: set[str] = set()
    for comm in proc.glob("[0-9]*/comm"):
        with contextlib.suppress(OSError):
            name = comm.read_text().strip()
            if name in DAEMONS or name.startswith("chronyd"):
                found.add(name)
    return tuple(sorted(found))


def serve_time(sock: socket.socket, clients: int, tries: int, deadline: float, clock: Callable[[], float]) -> None:
    """The first node's side: answer ``tries`` requests from each of ``clients`` connections
    with its receive and send times, one connection at a time. A client that stalls or drops is
    given up after CLIENT_S and the next served: it does not cost the others their offsets."""
    done = 0
    while done < clients and time.monotonic() < deadline:
        sock.settimeout(max(0.1, deadline - time.monotonic()))
        try:
            conn, _ = sock.accept()
        except TimeoutError:
            break
        with contextlib.suppress(OSError), conn:
            conn.settimeout(max(0.1, min(CLIENT_S, deadline - time.monotonic())))
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            for _ in range(tries):
                if not conn.recv(1):
                    break
                received = clock()
                conn.sendall(_PACKET.pack(received, clock()))
        done += 1


def ask_time(addr: str, port: int, tries: int, deadline: float, clock: Callable[[], float]) -> tuple[float, float]:
    """Another node's side: ``tries`` NTP-style exchanges with the first node; (offset s, round
    trip s) of the exchange with the shortest round trip. Offset: this clock minus the first's."""
    while True:
        try:
            conn = socket.create_connection((addr, port), timeout=max(0.1, deadline - time.monotonic()))
            break
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)  # the first node is not listening yet
    best: tuple[float, float] | None = None
    with conn:
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for _ in range(tries):
            sent = clock()
            conn.sendall(b"t")
            data = b""
            while len(data) < _PACKET.size:
                chunk = conn.recv(_PACKET.size - len(data))
                if not chunk:
                    raise ConnectionError(f"{addr}:{port} closed the exchange")
                data += chunk
            back = clock()
            received, replied = _PACKET.unpack(data)
            trip = (back - sent) - (replied - received)
            offset = ((sent - received) + (back - replied)) / 2  # this clock minus the first's
            if best is None or trip < best[1]:
                best = (offset, trip)
    assert best is not None
    return best


def clock_offset(
    ctx: TaskContext, tries: int, timeout_s: float, clock: Callable[[], float] = time.time
) -> ClockReading:
    """The kernel's state and the daemons, and (two nodes or more) the offset from the first node."""
    synced, max_error, est_error = kernel_clock()
    reading = ClockReading(synced, max_error, est_error, time_daemons())
    if ctx.num_nodes < 2:
        return reading
    reference = ctx.hostnames[0] if ctx.hostnames else ctx.master_addr
    port = ctx.master_port + 1  # beside the rendezvous port of the job's id; no torch runs in this job
    deadline = time.monotonic() + timeout_s
    try:
        if ctx.node_rank == 0:
            with socket.create_server(("", port), backlog=min(ctx.num_nodes, 4096)) as sock:
                serve_time(sock, ctx.num_nodes - 1, tries, deadline, clock)
            return ClockReading(synced, max_error, est_error, reading.daemons, reference=reference)
        offset, trip = ask_time(ctx.master_addr, port, tries, deadline, clock)
    except OSError as exc:
        why = f"no time exchange with {reference} on port {port}: {type(exc).__name__}: {exc}"
        return ClockReading(synced, max_error, est_error, reading.daemons, reference=reference, error=why)
    return ClockReading(
        synced,
        max_error,
        est_error,
        reading.daemons,
        reference=reference,
        offset_ms=round(offset * 1e3, 3),
        round_trip_ms=round(trip * 1e3, 3),
    )


def measure_node(
    ctx: TaskContext,
    *,
    array_bytes: int = 512 * 2**20,
    passes: int = 5,
    clock_tries: int = 16,
    timeout_s: float = 60.0,
) -> HostReport:
    """Workload, one task per node: the clock first (every node at once, before any load), then
    the memory bandwidth of each NUMA node in turn."""
    node = ctx.hostname or socket.gethostname()
    clock = clock_offset(ctx, clock_tries, timeout_s)
    held = len(os.sched_getaffinity(0))
    try:
        memory = memory_bandwidth(array_bytes, passes)
    except (RuntimeError, TimeoutError, MemoryError, OSError) as exc:
        return HostReport(node, held, memory_error=f"{type(exc).__name__}: {exc}", clock=clock)
    return HostReport(node, held, memory, clock=clock)

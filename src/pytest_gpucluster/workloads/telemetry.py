"""Telemetry under load (seed 001, "the monitoring harness"): what the GPUs, CPUs and memory of
a node did while a workload ran.

``Sampler`` is a context manager that samples in a side thread at a fixed interval: per GPU
through NVML (utilisation, SM clock, memory used, power, temperature, clock-event reasons) and per
node from /proc/stat and /proc/meminfo. ``under_telemetry`` runs any other workload under it, so
the collective and training workloads get telemetry without being edited. The analysis functions
at the end are pure and tested on recorded series: a GPU idling while its peers work, and clock
throttling for reasons an operator must act on.
"""

from __future__ import annotations

import contextlib
import os
import statistics
import threading
import time
from bisect import bisect_left
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, Generic, TypeVar

from pytest_gpucluster.workloads.context import TaskContext
from pytest_gpucluster.workloads.inventory import node_name

R = TypeVar("R")
DEFAULT_INTERVAL_S = 0.5
MAX_POINTS = 600  # per recorded series; longer runs are thinned so the results file stays small
GPU_METRICS = ("util", "sm_clock", "mem_used", "power", "temperature")
UNITS = {"util": "%", "sm_clock": "MHz", "mem_used": "MiB", "power": "W", "temperature": "C",
         "cpu_util": "%", "mem_used_pct": "%"}  # fmt: skip

# Clock-event reasons an operator must act on (NVML bit → words). SW power cap and GPU idle are
# how a healthy GPU under load or at rest looks, so they are not flagged.
BAD_THROTTLE = {
    0x8: "HW slowdown",
    0x20: "SW thermal slowdown",
    0x40: "HW thermal slowdown",
    0x80: "HW power brake slowdown",
}
# A GPU counts as idle below this utilisation, its peers as busy from this median utilisation.
IDLE_BELOW_PCT = 10.0
BUSY_FROM_PCT = 50.0


@dataclass(frozen=True)
class NodeTelemetry:
    """One node's samples. Times are seconds after ``t0`` (Unix time of the first sample)."""

    node: str
    interval_s: float
    t0: float
    gpus: dict[str, dict[str, list[tuple[float, float]]]]  # "gpu3" → metric → [(t, value)]
    node_series: dict[str, list[tuple[float, float]]]  # "cpu_util", "mem_used_pct"
    samples: int
    busy_s: float  # time the sampler itself spent sampling
    wall_s: float
    errors: tuple[str, ...] = ()
    # Why NVML read no GPU here (its exception, type and text), or "": the sampler still samples
    # the node, and the GPU checks say this instead of judging empty series.
    gpu_error: str = ""

    @property
    def busy_fraction(self) -> float:
        """Share of wall time the sampler thread was busy: its cost, measured in place."""
        return self.busy_s / self.wall_s if self.wall_s > 0 else 0.0


# --------------------------------------------------------------------------- pure helpers


def cpu_busy_percent(prev: Sequence[int], cur: Sequence[int]) -> float:
    """Busy share between two /proc/stat ``cpu`` lines (fields after the label)."""
    total = sum(cur) - sum(prev)
    idle = (cur[3] + cur[4]) - (prev[3] + prev[4])  # idle + iowait
    return 0.0 if total <= 0 else round(100.0 * (total - idle) / total, 1)


def read_cpu_times(proc_root: Path) -> list[int]:
    """The aggregate ``cpu`` line of /proc/stat as integers."""
    with open(proc_root / "stat", encoding="ascii") as f:
        return [int(x) for x in f.readline().split()[1:]]


def read_mem_used_percent(proc_root: Path) -> float:
    """Used host memory (MemTotal − MemAvailable) in % of MemTotal."""
    fields: dict[str, int] = {}
    with open(proc_root / "meminfo", encoding="ascii") as f:
        for line in f:
            key, _, rest = line.partition(":")
            if key in ("MemTotal", "MemAvailable"):
                fields[key] = int(rest.split()[0])
    total = fields.get("MemTotal", 0)
    return 0.0 if not total else round(100.0 * (total - fields.get("MemAvailable", total)) / total, 1)


def select_gpus(uuids: Sequence[str], visible: str | None) -> list[int]:
    """The NVML indices of the GPUs this job was given. NVML ignores CUDA_VISIBLE_DEVICES: where
    device cgroups are off it sees every GPU of the node, so the job's own must be picked out
    (by UUID, or by index when Slurm gave physical indices); with cgroups NVML sees only them."""
    if visible is None:
        return list(range(len(uuids)))
    items = [v.strip() for v in visible.split(",") if v.strip()]
    if not items:
        return []  # CUDA_VISIBLE_DEVICES="" hides every GPU: the job has none
    if all(v.isdigit() for v in items):
        wanted = [int(v) for v in items]
        if len(uuids) <= len(wanted):
            return list(range(len(uuids)))  # cgroup-constrained: indices are renumbered 0..k-1
        return [i for i in wanted if i < len(uuids)]
    return [i for i, u in enumerate(uuids) if any(u.startswith(v) or v.startswith(u) for v in items)]


# --------------------------------------------------------------------------- the sampler


class Sampler:
    """Samples this node every ``interval_s`` in a daemon thread while the ``with`` block runs."""

    def __init__(self, node: str, *, interval_s: float = DEFAULT_INTERVAL_S, proc_root: Path | str = "/proc",
                 gpus: bool = True, visible: str | None = None) -> None:  # fmt: skip
        self.node = node
        self.interval_s = interval_s
        self.proc_root = Path(proc_root)
        self._want_gpus = gpus
        self._visible = os.environ.get("CUDA_VISIBLE_DEVICES") if visible is None else visible
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._nvml: Any = None
        self._reasons: Callable[[Any], int] | None = None
        self._handles: dict[str, Any] = {}
        self._gpus: dict[str, dict[str, list[tuple[float, float]]]] = {}
        self._node_series: dict[str, list[tuple[float, float]]] = {"cpu_util": [], "mem_used_pct": []}
        self._errors: list[str] = []
        self._gpu_error = ""
        self._samples = 0
        self._busy = 0.0
        self._t0 = 0.0
        self._wall = 0.0
        self._prev_cpu: list[int] | None = None

    def _open_nvml(self) -> None:
        try:
            import pynvml

            pynvml.nvmlInit()
        except Exception as exc:  # no driver / no GPU: node series only
            self._no_gpus("NVML unavailable", exc)
            return
        self._nvml = pynvml
        # NVML renamed "throttle reasons" to "clocks event reasons"; older bindings lack the new name.
        self._reasons = (getattr(pynvml, "nvmlDeviceGetCurrentClocksEventReasons", None)
                         or pynvml.nvmlDeviceGetCurrentClocksThrottleReasons)  # fmt: skip
        try:
            count = pynvml.nvmlDeviceGetCount()
            handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
            uuids = []
            for h in handles:
                u = pynvml.nvmlDeviceGetUUID(h)
                uuids.append(u.decode() if isinstance(u, bytes) else str(u))
        except Exception as exc:  # a GPU fallen off the bus: the workload still runs, unwatched
            self._no_gpus("NVML could not list the GPUs", exc)
            return
        for i in select_gpus(uuids, self._visible):
            self._handles[f"gpu{i}"] = handles[i]
            self._gpus[f"gpu{i}"] = {m: [] for m in (*GPU_METRICS, "throttle")}

    def _no_gpus(self, what: str, exc: BaseException) -> None:
        text = str(exc).strip()
        self._gpu_error = f"{what}: {type(exc).__name__}" + (f": {text}" if text else "")
        self._errors.append(f"{self._gpu_error}; GPU series not sampled")

    def _sample_gpu(self, name: str, h: Any, t: float) -> None:
        nv = self._nvml
        readers: dict[str, Callable[[], float]] = {
            "util": lambda: float(nv.nvmlDeviceGetUtilizationRates(h).gpu),
            "sm_clock": lambda: float(nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM)),
            "mem_used": lambda: nv.nvmlDeviceGetMemoryInfo(h).used / 2**20,
            "power": lambda: nv.nvmlDeviceGetPowerUsage(h) / 1000.0,
            "temperature": lambda: float(nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU)),
            "throttle": lambda: float(self._reasons(h)),  # type: ignore[misc]
        }
        for metric, read in readers.items():
            try:
                self._gpus[name][metric].append((t, round(read(), 1)))
            except Exception as exc:  # unsupported on this GPU: remember once, keep sampling the rest
                note = f"{self.node}:{name}: {metric} not available ({type(exc).__name__})"
                if note not in self._errors:
                    self._errors.append(note)

    def sample(self) -> None:
        """Take one sample of every GPU and of the node now."""
        started = time.time()
        t = started - self._t0
        for name, h in self._handles.items():
            self._sample_gpu(name, h, t)
        try:
            cur = read_cpu_times(self.proc_root)
            if self._prev_cpu is not None:
                self._node_series["cpu_util"].append((t, cpu_busy_percent(self._prev_cpu, cur)))
            self._prev_cpu = cur
            self._node_series["mem_used_pct"].append((t, read_mem_used_percent(self.proc_root)))
        except (OSError, ValueError, IndexError) as exc:
            note = f"{self.node}: /proc not readable ({exc})"
            if note not in self._errors:
                self._errors.append(note)
        self._samples += 1
        self._busy += time.time() - started

    def _loop(self) -> None:
        next_at = time.monotonic()
        while not self._stop.is_set():
            self.sample()
            next_at += self.interval_s
            # Fixed-rate schedule: a slow sample does not shift every later one.
            self._stop.wait(max(0.0, next_at - time.monotonic()))

    def __enter__(self) -> Sampler:
        if self._want_gpus:
            self._open_nvml()
        self._t0 = time.time()
        # A CPU baseline now, so the first sample already has a CPU figure: a workload shorter
        # than one interval still yields two points of every series (start and end).
        with contextlib.suppress(OSError, ValueError, IndexError):
            self._prev_cpu = read_cpu_times(self.proc_root)
        self._thread = threading.Thread(target=self._loop, name="gpucluster-telemetry", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:  # fmt: skip
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=max(5.0, 4 * self.interval_s))
        self.sample()  # the state right at the end of the workload
        self._wall = time.time() - self._t0
        if self._nvml is not None:
            try:
                self._nvml.nvmlShutdown()
            except Exception:
                pass  # shutting down a library that is going away anyway

    def result(self) -> NodeTelemetry:
        """Everything sampled, as plain data."""
        return NodeTelemetry(node=self.node, interval_s=self.interval_s, t0=self._t0,
                             gpus={g: {m: list(v) for m, v in s.items()} for g, s in self._gpus.items()},
                             node_series={k: list(v) for k, v in self._node_series.items()},
                             samples=self._samples, busy_s=self._busy, wall_s=self._wall,
                             errors=tuple(self._errors), gpu_error=self._gpu_error)  # fmt: skip


# --------------------------------------------------------------------------- workloads


@dataclass(frozen=True)
class UnderTelemetry(Generic[R]):
    """A workload's own result and, from the node's first task, the node's telemetry."""

    value: R
    telemetry: NodeTelemetry | None


def under_telemetry(
    ctx: TaskContext, *, fn: Callable[..., R], interval_s: float = DEFAULT_INTERVAL_S, **kwargs: Any
) -> UnderTelemetry[R]:
    """Workload: run ``fn(ctx, **kwargs)`` while the node's first task samples the node. Other
    tasks of the node only run ``fn``, so each node is sampled once. ``fn`` is any workload
    function (it travels by reference, so it must live in an importable module), e.g.
    ``gpucluster.run(under_telemetry, spec, fn=collectives.sweep, op="all_reduce", ...)``."""
    if ctx.local_rank != 0:
        return UnderTelemetry(fn(ctx, **kwargs), None)
    with Sampler(node_name(ctx), interval_s=interval_s) as sampler:
        value = fn(ctx, **kwargs)
    return UnderTelemetry(value, sampler.result())


@dataclass(frozen=True)
class LoadResult:
    """What the built-in load did: GEMM + all_reduce iterations on every rank."""

    backend: str
    device: str
    iterations: int
    seconds: float
    matmul_n: int
    all_reduce_bytes: int

    @property
    def iterations_per_s(self) -> float:
        """Throughput of the loop: the figure the telemetry overhead benchmark compares."""
        return self.iterations / self.seconds if self.seconds > 0 else 0.0


# CPU runs prove the path, not the speed: sizes and duration are capped there.
_CPU_CAPS = {"matmul_n": 256, "all_reduce_bytes": 2**18, "seconds": 5.0}


def _operands(ctx: TaskContext, backend: str, matmul_n: int, all_reduce_bytes: int) -> tuple[Any, ...]:
    import torch

    from pytest_gpucluster.workloads.distributed import device_for

    device = device_for(ctx, backend)
    on_cpu = device.type == "cpu"
    if on_cpu:
        matmul_n = min(matmul_n, int(_CPU_CAPS["matmul_n"]))
        all_reduce_bytes = min(all_reduce_bytes, int(_CPU_CAPS["all_reduce_bytes"]))
    dtype = torch.float32 if on_cpu else torch.bfloat16
    a = torch.randn(matmul_n, matmul_n, device=device, dtype=dtype)
    b = torch.randn(matmul_n, matmul_n, device=device, dtype=dtype)
    buf = torch.zeros(max(2, all_reduce_bytes // 4), device=device, dtype=torch.float32)
    return device, a, b, buf


def _loop(ctx: TaskContext, a: Any, b: Any, buf: Any, *, seconds: float | None, iterations: int | None
          ) -> tuple[int, float]:  # fmt: skip
    """GEMM + all_reduce until rank 0's clock passes ``seconds`` (the stop flag rides in the
    all_reduce, so every rank stops at the same iteration) or for exactly ``iterations``."""
    import torch
    import torch.distributed as dist

    dist.barrier()
    start = time.perf_counter()
    done = 0
    while True:
        torch.matmul(a, b)
        buf[0] = 1.0 if (ctx.rank == 0 and seconds is not None and time.perf_counter() - start >= seconds) else 0.0
        dist.all_reduce(buf)
        done += 1
        if iterations is not None and done >= iterations:
            break
        if seconds is not None and float(buf[0].item()) > 0:  # .item() also syncs the GPU
            break
    if buf.is_cuda:
        torch.cuda.synchronize(buf.device)
    return done, time.perf_counter() - start


def matmul_all_reduce(
    ctx: TaskContext,
    *,
    seconds: float | None = None,
    iterations: int | None = None,
    matmul_n: int = 8192,
    all_reduce_bytes: int = 256 * 2**20,
    backend: str | None = None,
    timeout_s: float = 300.0,
) -> LoadResult:
    """Workload: a bf16 GEMM then an all_reduce on every rank, repeated for ``seconds`` or for
    exactly ``iterations``. The stand-in load of the telemetry check."""
    from pytest_gpucluster.workloads.distributed import process_group

    if seconds is None and iterations is None:
        raise ValueError("matmul_all_reduce: give seconds or iterations")
    with process_group(ctx, backend=backend, timeout_s=timeout_s) as used:
        device, a, b, buf = _operands(ctx, used, matmul_n, all_reduce_bytes)
        if device.type == "cpu" and seconds is not None:
            seconds = min(seconds, _CPU_CAPS["seconds"])
        done, elapsed = _loop(ctx, a, b, buf, seconds=seconds, iterations=iterations)
    return LoadResult(used, str(device), done, elapsed, a.shape[0], buf.numel() * 4)


@dataclass(frozen=True)
class OverheadResult:
    """Seconds per GEMM + all_reduce iteration, per round, without sampling ("off") and with a
    sampler at each interval ("0.5", ...), and how busy the sampler thread was."""

    backend: str
    device: str
    world_size: int
    matmul_n: int
    all_reduce_bytes: int
    iterations: int
    seconds_per_iteration: dict[str, list[float]]
    sampler_busy_fraction: dict[str, list[float]]
    gpus_sampled: int


def telemetry_overhead(
    ctx: TaskContext,
    *,
    rounds: int = 6,
    iterations: int = 500,
    matmul_n: int = 8192,
    all_reduce_bytes: int = 256 * 2**20,
    intervals: tuple[float, ...] = (DEFAULT_INTERVAL_S,),
    backend: str | None = None,
    timeout_s: float = 300.0,
) -> OverheadResult:
    """Workload: the same loop as ``matmul_all_reduce`` with and without the sampler on the
    node's first task, in alternating order (off, on, on, off, ...) so slow drift cancels."""
    from pytest_gpucluster.workloads.distributed import process_group

    modes = ["off"] + [f"{i:g}" for i in intervals]
    per: dict[str, list[float]] = {m: [] for m in modes}
    busy: dict[str, list[float]] = {m: [] for m in modes[1:]}
    gpus = 0
    with process_group(ctx, backend=backend, timeout_s=timeout_s) as used:
        device, a, b, buf = _operands(ctx, used, matmul_n, all_reduce_bytes)
        _loop(ctx, a, b, buf, seconds=None, iterations=max(5, iterations // 10))  # warm-up
        for r in range(rounds):
            for mode in modes if r % 2 == 0 else modes[::-1]:
                if mode == "off" or ctx.local_rank != 0:
                    done, elapsed = _loop(ctx, a, b, buf, seconds=None, iterations=iterations)
                else:
                    with Sampler(node_name(ctx), interval_s=float(mode)) as sampler:
                        done, elapsed = _loop(ctx, a, b, buf, seconds=None, iterations=iterations)
                    result = sampler.result()
                    busy[mode].append(round(result.busy_fraction, 5))
                    gpus = len(result.gpus)
                per[mode].append(elapsed / done)
    return OverheadResult(used, str(device), ctx.world_size, a.shape[0], buf.numel() * 4, iterations, per, busy, gpus)


# --------------------------------------------------------------------------- analysis (pure)


@dataclass(frozen=True)
class IdleFraction:
    """How often one GPU idled while the median of its peers was busy."""

    where: str
    percent: float
    idle_samples: int
    peer_busy_samples: int

    @property
    def detail(self) -> str:
        """Words for the measurement's detail field."""
        return f"idle in {self.idle_samples} of {self.peer_busy_samples} samples while its peers were busy"


def absolute_util(telemetry: Sequence[NodeTelemetry]) -> dict[str, list[tuple[float, float]]]:
    """Every GPU's utilisation series on one clock (Unix time), keyed ``node:gpuN``."""
    out: dict[str, list[tuple[float, float]]] = {}
    for nt in telemetry:
        for gpu, series in nt.gpus.items():
            out[f"{nt.node}:{gpu}"] = [(nt.t0 + t, v) for t, v in series.get("util", [])]
    return out


def _nearest(series: Sequence[tuple[float, float]], times: Sequence[float], t: float, tol: float) -> float | None:
    i = bisect_left(times, t)
    best: tuple[float, float] | None = None
    for j in (i - 1, i):
        if 0 <= j < len(series) and abs(series[j][0] - t) <= tol and (best is None or abs(series[j][0] - t) < best[0]):
            best = (abs(series[j][0] - t), series[j][1])
    return None if best is None else best[1]


def idle_fractions(
    util: Mapping[str, Sequence[tuple[float, float]]],
    *,
    interval_s: float = DEFAULT_INTERVAL_S,
    idle_below: float = IDLE_BELOW_PCT,
    busy_from: float = BUSY_FROM_PCT,
) -> dict[str, IdleFraction]:
    """Per GPU: of the samples in which its peers' median utilisation was ≥ ``busy_from``, the %
    in which it was itself below ``idle_below``. Peers' samples are matched to the nearest within
    1.5 intervals (clocks of different nodes are not in step). 0 % when the peers never worked."""
    times = {w: [t for t, _ in s] for w, s in util.items()}
    out: dict[str, IdleFraction] = {}
    for where, series in util.items():
        peers = [p for p in util if p != where]
        busy = idle = 0
        for t, v in series:
            values = [x for p in peers if (x := _nearest(util[p], times[p], t, 1.5 * interval_s)) is not None]
            if not values or statistics.median(values) < busy_from:
                continue
            busy += 1
            idle += v < idle_below
        out[where] = IdleFraction(where, round(100.0 * idle / busy, 1) if busy else 0.0, idle, busy)
    return out


def unjudged_idle(fractions: Mapping[str, IdleFraction]) -> list[str]:
    """GPUs whose idleness could not be judged: no sample came while their peers were busy (the
    fraction would read 0 % on nothing)."""
    return [f"{w}: no sample came while its peers were busy: its idleness cannot be judged"
            for w, f in sorted(fractions.items()) if not f.peer_busy_samples]  # fmt: skip


def empty_gpu_series_problems(telemetry: Sequence[NodeTelemetry]) -> list[str]:
    """One sentence per node whose GPU series are empty (no GPU, or not one sample of any GPU),
    naming the node and the sampler's error: on nodes with GPU devices, an idle or throttle check
    over such series would pass on nothing."""
    problems = []
    for nt in telemetry:
        if any(points for series in nt.gpus.values() for points in series.values()):
            continue
        why = nt.gpu_error or "; ".join(nt.errors) or "the sampler recorded no error"
        what = "no GPU" if not nt.gpus else f"no sample of its {len(nt.gpus)} GPU(s)"
        problems.append(f"{nt.node}: the telemetry sampler read {what} ({why})")
    return problems


def throttle_problems(telemetry: Sequence[NodeTelemetry]) -> list[str]:
    """One sentence per GPU and bad clock-event reason seen, with how long it lasted."""
    problems = []
    for nt in telemetry:
        for gpu, series in sorted(nt.gpus.items()):
            samples = series.get("throttle", [])
            for bit, words in BAD_THROTTLE.items():
                hits = sum(1 for _, mask in samples if int(mask) & bit)
                if hits:
                    problems.append(f"{nt.node}:{gpu}: {words} in {hits} of {len(samples)} samples "
                                    f"(~{hits * nt.interval_s:g} s)")  # fmt: skip
    return problems


def _thin(points: Sequence[tuple[float, float]], limit: int = MAX_POINTS) -> list[list[float]]:
    step = max(1, -(-len(points) // limit))
    return [[round(t, 2), v] for t, v in points[::step]]


def series_records(telemetry: Sequence[NodeTelemetry], prefix: str = "telemetry") -> list[dict[str, Any]]:
    """``record("series", ...)`` payloads: every GPU metric per ``node:gpuN`` and the node's CPU
    and memory use, on one time axis (seconds after the earliest node's first sample), named
    ``<prefix>.gpu_<metric>`` and ``<prefix>.<metric>`` (one prefix per watched workload)."""
    if not telemetry:
        return []
    origin = min(nt.t0 for nt in telemetry)
    out: list[dict[str, Any]] = []
    for nt in sorted(telemetry, key=lambda n: n.node):
        shift = nt.t0 - origin
        for gpu, series in sorted(nt.gpus.items()):
            for metric in GPU_METRICS:
                points = [(t + shift, v) for t, v in series.get(metric, [])]
                out.append({"name": f"{prefix}.gpu_{metric}", "where": f"{nt.node}:{gpu}", "x_label": "s",
                            "y_label": UNITS[metric], "points": _thin(points)})  # fmt: skip
        for metric, series_ in sorted(nt.node_series.items()):
            points = [(t + shift, v) for t, v in series_]
            out.append({"name": f"{prefix}.{metric}", "where": nt.node, "x_label": "s",
                        "y_label": UNITS[metric], "points": _thin(points)})  # fmt: skip
    return out

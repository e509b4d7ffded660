"""Telemetry under load: what the GPUs, CPUs and memory of a node did while a workload ran.

``Sampler`` is a context manager that samples in a side thread at a fixed interval: per GPU
through NVML (utilisation, SM clock, memory used, power, temperature, clock-event reasons) and per
node from /proc/stat and /proc/meminfo. ``under_telemetry`` runs any other workload under it, so
the collective and training workloads get telemetry without being edited. ``checks.telemetry``
analyses what was sampled on the login node.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, Generic, TypeVar

from pytest_gpucluster.workloads.context import TaskContext
from pytest_gpucluster.workloads.inventory import node_name

R = TypeVar("R")
DEFAULT_INTERVAL_S = 0.5
GPU_METRICS = ("util", "sm_clock", "mem_used", "power", "temperature")


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

    def __init__(
        self,
        node: str,
        *,
        interval_s: float = DEFAULT_INTERVAL_S,
        proc_root: Path | str = "/proc",
        gpus: bool = True,
        visible: str | None = None,
    ) -> None:
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
        self._reasons = (
            getattr(pynvml, "nvmlDeviceGetCurrentClocksEventReasons", None)
            or pynvml.nvmlDeviceGetCurrentClocksThrottleReasons
        )
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

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
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
        return NodeTelemetry(
            node=self.node,
            interval_s=self.interval_s,
            t0=self._t0,
            gpus={g: {m: list(v) for m, v in s.items()} for g, s in self._gpus.items()},
            node_series={k: list(v) for k, v in self._node_series.items()},
            samples=self._samples,
            busy_s=self._busy,
            wall_s=self._wall,
            errors=tuple(self._errors),
            gpu_error=self._gpu_error,
        )


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

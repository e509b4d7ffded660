"""The soak: one long job per node that runs cycles of load back to back on every GPU until its
duration ends, and streams each finished cycle to the shared filesystem as it ends.

A cycle (``SoakConfig.cycle_s``) on every GPU of the node at once: bf16 GEMMs for most of it, then
a device-to-device copy, then an all_reduce of ``collective_bytes`` across the node's GPUs, and
every ``sdc_every`` cycles the seeded SDC chain (``workloads.sdc``). While it runs, NVML is read
about every ``sample_s`` (SM clock, GPU and memory temperature, power, clock-event reasons); at
its end the memory error counters (uncorrectable ECC, row remaps, pending page retirements), the
Xid events seen since the last cycle and the fabric error counters (the node's InfiniBand ports
by its first task, each GPU's NVLinks by its own task) are read. One JSON line per GPU and cycle
goes to ``<stream_dir>/<node>.<gpuN>.jsonl``; the login side reads the files while the soak runs,
so a soak that is interrupted, loses its node or reaches Slurm's time limit keeps every finished
cycle.

The login side ends a node's soak early by writing ``stop.<node>`` (or ``stop`` for every node)
into the stream folder; the node's first task looks before each cycle and tells the others.
Without GPUs, CPU ranks stand in with tiny sizes (fp32 GEMMs, gloo), as in ``workloads.compute``.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Annotated, Any

from pytest_gpucluster.workloads import sdc as sdc_load
from pytest_gpucluster.workloads.busbw import busbw_gbps
from pytest_gpucluster.workloads.context import TaskContext
from pytest_gpucluster.workloads.distributed import device_for, process_group
from pytest_gpucluster.workloads.fabric_counters import SYSFS_ROOT, gpu_links, read_ib_counters
from pytest_gpucluster.workloads.nvml_util import FAILING_REASONS, decode_throttle_reasons, gpu_label, nvml_handle
from pytest_gpucluster.workloads.xid import XidWatcher, node_of

# The clock-event reasons a cycle counts (events and seconds): those that mean a sick node and the
# power cap, which a GPU under full load sits at by design (recorded, never judged).
RECORDED_REASONS = (*sorted(FAILING_REASONS), "sw_power_cap")
STOP_ALL = "stop"
# Shares of a cycle: GEMMs until this fraction of it, the copy until the next, the collective after.
GEMM_SHARE = 0.7
COPY_SHARE = 0.85


@dataclass(frozen=True)
class SoakConfig:
    """One cycle's work; field names follow a profile's ``[soak]`` table (config/soak.py)."""

    cycle_s: float = 60.0
    sdc_every: int = 5  # the SDC chain in cycles 0, sdc_every, 2·sdc_every, ...; 0: never
    matmul_n: int = 8192
    copy_bytes: Annotated[int, "bytes"] = 2 * 2**30
    collective_bytes: Annotated[int, "bytes"] = 2**30
    sample_s: float = 1.0

    def __post_init__(self) -> None:
        if self.cycle_s <= 0 or self.sample_s <= 0:
            raise ValueError(f"soak cycle_s={self.cycle_s}, sample_s={self.sample_s}: both must be above 0")
        if self.sdc_every < 0 or self.matmul_n < 2 or self.copy_bytes < 4 or self.collective_bytes < 4:
            raise ValueError("soak sdc_every must be ≥ 0, matmul_n ≥ 2, copy_bytes and collective_bytes ≥ 4")


# What CPU ranks run instead of the GPU-sized default.
TINY = SoakConfig(cycle_s=5.0, sdc_every=3, matmul_n=192, copy_bytes=8 * 2**20, collective_bytes=2**20)


def stream_name(node: str, gpu: str) -> str:
    """The stream file of one GPU (or CPU rank) of one node."""
    return f"{node}.{gpu}.jsonl"


def stop_name(node: str) -> str:
    """The file that ends ``node``'s soak before its next cycle."""
    return f"{STOP_ALL}.{node}"


@dataclass(frozen=True)
class SoakSummary:
    """What one task returns: how many cycles it finished and why it stopped."""

    node: str
    gpu: str
    device_name: str
    cycles: int
    ended: str  # "duration", "stopped" (stop.<node>), "stopped_all" (stop)
    stream: str


@dataclass
class _Samples:
    """NVML readings of one GPU, about every ``interval_s`` on a thread; drained each cycle."""

    handle: Any
    interval_s: float
    rows: list[tuple[float, int, int, int, float, int]] = field(default_factory=list)  # t, sm, temp, mem, W, mask
    errors: list[str] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def _read(self) -> None:
        import pynvml

        h = self.handle
        try:
            reasons = getattr(pynvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or (
                pynvml.nvmlDeviceGetCurrentClocksThrottleReasons
            )
            try:
                mem = int(pynvml.nvmlDeviceGetTemperatureV(h, pynvml.NVML_TEMPERATURE_MEMORY))  # newer NVML
            except Exception:
                mem = -1
            row = (
                time.time(),
                int(pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM)),
                int(pynvml.nvmlDeviceGetTemperature(h, pynvml.NVML_TEMPERATURE_GPU)),
                mem,
                pynvml.nvmlDeviceGetPowerUsage(h) / 1000.0,
                int(reasons(h)),
            )
        except Exception as exc:  # one failed read must not end the soak; it is reported
            if len(self.errors) < 5:
                self.errors.append(f"{type(exc).__name__}: {exc}")
            return
        with self._lock:
            self.rows.append(row)

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._read()
            self._stop.wait(self.interval_s)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="soak-nvml", daemon=True)
        self._thread.start()

    def drain(self) -> list[tuple[float, int, int, int, float, int]]:
        with self._lock:
            rows, self.rows = self.rows, []
        return rows

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=max(5.0, 3 * self.interval_s))


def summarize_samples(rows: list[tuple[float, int, int, int, float, int]], previous_mask: int) -> dict[str, Any]:
    """One cycle's NVML readings in the cycle record's fields: mean and lowest SM clock, highest GPU
    and memory temperature, mean and highest power, and for each reason of ``RECORDED_REASONS`` the
    events (a sample with the reason where the one before had none; ``previous_mask`` is the last
    sample of the cycle before) and the seconds with it set (samples × their spacing). Pure."""
    if not rows:
        return {"samples": 0}
    clocks = [r[1] for r in rows]
    powers = [r[4] for r in rows]
    span = (rows[-1][0] - rows[0][0]) / (len(rows) - 1) if len(rows) > 1 else 1.0
    throttle: dict[str, list[float]] = {}
    masks = [previous_mask, *(r[5] for r in rows)]
    for reason in RECORDED_REASONS:
        on = [reason in decode_throttle_reasons(m) for m in masks]
        events = sum(1 for before, now in itertools.pairwise(on) if now and not before)
        seconds = sum(on[1:]) * span
        if events or seconds:
            throttle[reason] = [events, round(seconds, 1)]
    mem = [r[3] for r in rows if r[3] >= 0]
    out: dict[str, Any] = {
        "samples": len(rows),
        "sm_mhz": round(sum(clocks) / len(clocks)),
        "sm_mhz_min": min(clocks),
        "temp_c": max(r[2] for r in rows),
        "power_w": round(sum(powers) / len(powers), 1),
        "power_w_max": round(max(powers), 1),
        "last_mask": rows[-1][5],
    }
    if mem:
        out["mem_temp_c"] = max(mem)
    if throttle:
        out["throttle"] = throttle
    return out


def memory_errors(handle: Any) -> dict[str, int]:
    """This GPU's memory error counters now: volatile uncorrectable ECC errors, pending and failed
    row remaps, pages pending retirement; a counter NVML does not give is left out."""
    import pynvml

    out: dict[str, int] = {}
    reads: dict[str, Callable[[], Any]] = {
        "ecc_unc": lambda: pynvml.nvmlDeviceGetTotalEccErrors(
            handle, pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, pynvml.NVML_VOLATILE_ECC
        ),
        "remap": lambda: pynvml.nvmlDeviceGetRemappedRows(handle),
        "retired_pending": lambda: pynvml.nvmlDeviceGetRetiredPagesPendingStatus(handle),
    }
    for key, read in reads.items():
        try:
            value = read()
        except Exception:
            continue
        if key == "remap":
            out["remap_pending"], out["remap_failed"] = int(value[2]), int(value[3])
        else:
            out[key] = int(value)
    return out


def stack_versions() -> dict[str, str]:
    """The driver and the CUDA version it supports, as NVML gives them: a soak run on its own still
    says which software stack it soaked."""
    import pynvml

    out: dict[str, str] = {}
    try:
        driver = pynvml.nvmlSystemGetDriverVersion()
        out["driver"] = driver.decode() if isinstance(driver, bytes) else str(driver)
        cuda = int(pynvml.nvmlSystemGetCudaDriverVersion())
        out["cuda"] = f"{cuda // 1000}.{cuda % 1000 // 10}"
    except Exception:
        pass  # a fact NVML does not give is left out, as for the counters
    return out


def _fabric(node_first: bool, root: str, nvml_index: int | None) -> dict[str, Any]:
    """The fabric error counters this task reads: the node's InfiniBand ports (its first task) and
    its own GPU's NVLinks and PCIe link, as absolute values (the login side takes the differences)."""
    out: dict[str, Any] = {}
    if node_first:
        with contextlib.suppress(Exception):
            ports = read_ib_counters(root)
            if ports:
                out["ib"] = {f"{p.hca}/{p.port}": dict(p.counters) for p in ports}
    if nvml_index is not None:
        with contextlib.suppress(Exception):
            import pynvml

            gpu = gpu_links(pynvml, nvml_index)
            if gpu.links:
                out["nvlink"] = {str(link.link): dict(link.counters) for link in gpu.links}
            if gpu.pcie:
                out["pcie"] = {"link": dict(gpu.pcie)}
    return out


class _Stream:
    """One GPU's stream file: a JSON line per record, flushed and synced so the login node reads
    each cycle as soon as it is written."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._file = path.open("a", encoding="utf-8")

    def write(self, record: dict[str, Any]) -> None:
        self._file.write(json.dumps(record, separators=(",", ":")) + "\n")
        self._file.flush()
        with contextlib.suppress(OSError):
            os.fsync(self._file.fileno())

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._file.close()


def soak(
    ctx: TaskContext,
    *,
    config: SoakConfig,
    sdc: sdc_load.SdcConfig,
    duration_s: float,
    stream_dir: str,
    fabric_root: str = SYSFS_ROOT,
    backend: str | None = None,
    timeout_s: float = 600.0,
) -> SoakSummary:
    """Cycles on this task's GPU (or CPU rank) until ``duration_s`` has passed since the node's
    tasks met, or the login side stops it; every cycle streamed (module docstring)."""
    import torch
    import torch.distributed as dist

    node = node_of(ctx)
    folder = Path(stream_dir)
    with process_group(ctx, backend=backend, timeout_s=timeout_s) as used:
        on_gpu = used == "nccl"
        device = device_for(ctx, used)
        if on_gpu:
            torch.cuda.set_device(device)
        else:
            torch.set_num_threads(1)  # one core per stand-in rank: ranks must not slow each other
        label = gpu_label(device, ctx.local_rank)
        handle = nvml_handle(device) if on_gpu else None
        nvml_index = _nvml_index(handle)
        stream = _Stream(folder / stream_name(node, label))
        sampler = _Samples(handle, config.sample_s) if handle is not None else None
        # The node's Xid events, watched by its first task (each event names its GPU).
        watcher = XidWatcher(node, ctx.job_id, ctx.rank).start() if handle is not None and ctx.local_rank == 0 else None
        load = _Load(config, device, on_gpu, dist.get_world_size())
        name = torch.cuda.get_device_name(device) if on_gpu else "cpu"
        # The counters before the first cycle: what rises during the soak is judged, not what was.
        first: dict[str, Any] = {"kind": "start", "node": node, "gpu": label, "device": name, "job": ctx.job_id}
        if handle is not None:
            first.update(memory_errors(handle))
            first.update(stack_versions())
        fabric = _fabric(ctx.local_rank == 0, fabric_root, nvml_index)
        if fabric:
            first["fabric"] = fabric
        stream.write({**first, "t": time.time()})
        if sampler is not None:
            sampler.start()
        cycles, ended, mask, xids_read = 0, "duration", 0, 0
        try:
            dist.barrier()
            deadline = time.time() + duration_s
            last_len = config.cycle_s
            while True:
                why = _stop_reason(folder, node, deadline, last_len) if ctx.local_rank == 0 else ""
                why = _agree(why, on_gpu, device)
                if why:
                    ended = why
                    break
                t0 = time.time()
                record: dict[str, Any] = {"kind": "cycle", "node": node, "gpu": label, "cycle": cycles, "t0": t0}
                try:
                    record.update(load.cycle(t0))
                    if config.sdc_every and cycles % config.sdc_every == 0:
                        result = sdc_load.compute(sdc, device=device, node=node, gpu=label)
                        record["sdc"] = result.digest
                except Exception as exc:  # the node's fault: said in the record, then raised
                    record["error"] = f"{type(exc).__name__}: {exc}"[:500]
                    record["t1"] = time.time()
                    stream.write(record)
                    raise
                dist.barrier()
                record["t1"] = time.time()
                if sampler is not None:
                    summary = summarize_samples(sampler.drain(), mask)
                    mask = int(summary.pop("last_mask", mask))
                    record.update(summary)
                    if sampler.errors:
                        record["nvml_errors"] = list(dict.fromkeys(sampler.errors))
                        sampler.errors.clear()
                if handle is not None:
                    record.update(memory_errors(handle))
                if watcher is not None:
                    events = watcher.seen()
                    seen, xids_read = events[xids_read:], len(events)
                    if seen:
                        record["xids"] = [
                            {"xid": e.xid, "t": round(e.epoch, 3), "gpu": e.gpu.index if e.gpu else None} for e in seen
                        ]
                fabric = _fabric(ctx.local_rank == 0, fabric_root, nvml_index)
                if fabric:
                    record["fabric"] = fabric
                stream.write(record)
                last_len = record["t1"] - t0
                cycles += 1
        finally:
            if sampler is not None:
                sampler.stop()
            if watcher is not None:
                watcher.stop()
            stream.write(
                {"kind": "end", "node": node, "gpu": label, "t": time.time(), "cycles": cycles, "ended": ended}
            )
            stream.close()
            load.free()
    return SoakSummary(node, label, name, cycles, ended, str(stream.path))


def _nvml_index(handle: Any) -> int | None:
    if handle is None:
        return None
    try:
        import pynvml

        return int(pynvml.nvmlDeviceGetIndex(handle))
    except Exception:
        return None


def _stop_reason(folder: Path, node: str, deadline: float, last_len: float) -> str:
    """Why the node's soak ends before the next cycle, or "": the login side's stop file, or the
    duration (the next cycle would end past it)."""
    if (folder / STOP_ALL).exists():
        return "stopped_all"
    if (folder / stop_name(node)).exists():
        return "stopped"
    if time.time() + last_len > deadline:
        return "duration"
    return ""


_REASONS = ("", "duration", "stopped", "stopped_all")


def _agree(why: str, on_gpu: bool, device: Any) -> str:
    """The first task's decision, told to every task of the node."""
    import torch
    import torch.distributed as dist

    flag = torch.tensor([_REASONS.index(why)], dtype=torch.int64, device=device if on_gpu else "cpu")
    dist.broadcast(flag, src=0)
    return _REASONS[int(flag.item())]


class _Load:
    """The buffers one task's cycles work on, made once."""

    def __init__(self, config: SoakConfig, device: Any, on_gpu: bool, world: int) -> None:
        import torch

        self.config, self.device, self.on_gpu, self.world = config, device, on_gpu, world
        n = config.matmul_n
        dtype = torch.bfloat16 if on_gpu else torch.float32
        g = torch.Generator(device=device).manual_seed(1234)
        # Random operands: zeros run measurably faster and would flatter the GPU.
        self.a = torch.randn(n, n, device=device, dtype=dtype, generator=g)
        self.b = torch.randn(n, n, device=device, dtype=dtype, generator=g)
        self.c = torch.empty(n, n, device=device, dtype=dtype)
        numel = max(1, config.copy_bytes // 4)
        self.src = torch.rand(numel, device=device, dtype=torch.float32)
        self.dst = torch.empty_like(self.src)
        self.buf = (
            torch.ones(max(1, config.collective_bytes // 4), device=device, dtype=torch.float32) if world > 1 else None
        )
        # The last all_reduce's time: the first cycle makes a few, later ones fill their share.
        self.per_call = config.cycle_s

    def _sync(self) -> None:
        if self.on_gpu:
            import torch

            torch.cuda.synchronize(self.device)

    def _repeat(self, run: Callable[[], Any], until: float, batch: int) -> tuple[int, float]:
        """Call ``run`` in batches until ``until`` (at least one batch); (calls, seconds)."""
        done, t0 = 0, time.perf_counter()
        while True:
            for _ in range(batch):
                run()
            self._sync()
            done += batch
            if time.time() >= until:
                return done, time.perf_counter() - t0

    def cycle(self, t0: float) -> dict[str, Any]:
        """One cycle's GEMMs, copy and collective: TFLOP/s, TB/s (bytes read plus written) and the
        all_reduce's bus bandwidth (none on a node of one rank)."""
        import torch

        cfg = self.config
        n = cfg.matmul_n
        gemm = self._repeat(lambda: torch.matmul(self.a, self.b, out=self.c), t0 + GEMM_SHARE * cfg.cycle_s, 8)
        calls, seconds = gemm
        out: dict[str, Any] = {"tflops": round(2.0 * n**3 * calls / seconds / 1e12, 4)}
        # Without peers on the node (one GPU) the copy takes the collective's share too.
        copy_until = t0 + (COPY_SHARE if self.buf is not None else 1.0) * cfg.cycle_s
        calls, seconds = self._repeat(lambda: self.dst.copy_(self.src), copy_until, 4)
        out["copy_tbps"] = round(2 * self.src.numel() * 4 * calls / seconds / 1e12, 5)
        if self.buf is not None:
            out["busbw_gbps"] = self._all_reduce(t0 + cfg.cycle_s)
        return out

    def _all_reduce(self, until: float) -> float:
        """All_reduces of the buffer until ``until``: as many as the first task says (every task
        must make the same calls), from the time one took in the cycle before. Bus bandwidth."""
        import torch
        import torch.distributed as dist

        buf = self.buf
        assert buf is not None
        count = torch.tensor([max(1, int((until - time.time()) / self.per_call))], dtype=torch.int64)
        count = count.to(self.device) if self.on_gpu else count
        dist.broadcast(count, src=0)
        calls = int(count.item())
        dist.barrier()
        t0 = time.perf_counter()
        for _ in range(calls):
            dist.all_reduce(buf)
        self._sync()
        seconds = time.perf_counter() - t0
        self.per_call = seconds / calls
        return round(busbw_gbps("all_reduce", self.world, buf.numel() * 4, seconds / calls), 3)

    def free(self) -> None:
        del self.a, self.b, self.c, self.src, self.dst, self.buf
        if self.on_gpu:
            import torch

            torch.cuda.empty_cache()


def read_stream(path: Path, offset: int = 0) -> tuple[list[dict[str, Any]], int]:
    """The complete records of a stream file from byte ``offset``, and the offset after the last
    complete line (a line being written stays for the next read). Pure but for the read."""
    try:
        with path.open("rb") as f:
            f.seek(offset)
            data = f.read()
    except OSError:
        return [], offset
    end = data.rfind(b"\n") + 1
    records = []
    for line in data[:end].splitlines():
        with contextlib.suppress(ValueError):
            records.append(json.loads(line))
    return records, offset + end


def config_dict(config: SoakConfig) -> dict[str, Any]:
    """The config as the results record it."""
    return asdict(config)

"""Per-GPU compute and memory ceilings, and a burn under NVML watch.

``measure_ceilings`` runs as one task per GPU, every GPU of every node in one job, started
together behind a barrier so each GPU is measured while its node is fully loaded (power and heat
shared, as in training). A large square GEMM on random data gives TFLOP/s (bf16 on GPUs, fp32 on
a CPU); a device-to-device copy gives TB/s counting bytes read plus bytes written.

``fractions_of_median`` and ``outliers`` (pure) find the GPU that lags its own node: a contended
or sick GPU can run at half its peers' speed while still far above any absolute floor one would
dare to set (docs/gpu-runs.md records such a case).
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any

from pytest_gpucluster.workloads.context import TaskContext
from pytest_gpucluster.workloads.distributed import device_for, pick_backend, process_group
from pytest_gpucluster.workloads.nvml_util import ClockWatcher, NvmlSample, failing_reasons, gpu_label, nvml_handle


@dataclass(frozen=True)
class ComputeConfig:
    """Probe sizes; a profile's ``[compute]`` table is one of these (config/profile.py lists the
    keys it may set)."""

    matmul_n: int = 8192
    matmul_iters: int = 50
    copy_bytes: Annotated[int, "bytes"] = 4 * 2**30  # "bytes": thresholds.toml may write "4GiB"
    copy_iters: int = 20
    burn_s: int = 120
    warmup_iters: int = 3


# What a CPU runs instead of the GPU-sized default: the ci profile's [compute] sizes.
TINY = ComputeConfig(matmul_n=256, matmul_iters=5, copy_bytes=16 * 2**20, copy_iters=3, burn_s=10, warmup_iters=1)


# Without real GPUs, this many CPU ranks per node stand in for its GPUs (the median logic needs
# more than one).
CPU_RANKS_PER_NODE = 2


@dataclass(frozen=True)
class ComputePlan:
    """What the tests launch: sizes, job shape and why they differ from the profile's, if so."""

    config: ComputeConfig
    ranks_per_node: int
    gpus_per_node: int
    note: str = ""


def plan_compute(config: ComputeConfig, *, gpus_per_node: int, real_gpus: bool) -> ComputePlan:
    """One task per GPU for a profile's ``[compute]`` config. Without real GPUs,
    ``CPU_RANKS_PER_NODE`` CPU ranks stand in, and a config still at the GPU-sized default runs
    ``TINY`` (fp32) instead."""
    if real_gpus and gpus_per_node > 0:
        return ComputePlan(config, gpus_per_node, gpus_per_node)
    note = ""
    if config == ComputeConfig():
        config = TINY
        note = (
            f"no GPUs: fp32 GEMM {TINY.matmul_n}³ and a {TINY.copy_bytes // 2**20} MiB copy on "
            f"{CPU_RANKS_PER_NODE} CPU ranks per node stand in for the GPU-sized default"
        )
    return ComputePlan(config, CPU_RANKS_PER_NODE, 0, note)


@dataclass(frozen=True)
class GpuCeiling:
    """One GPU's measured ceilings."""

    node: str
    gpu: str
    device_name: str
    dtype: str
    matmul_tflops: float
    copy_tbps: float
    matmul_checked: bool  # a sample of the product matched a reference computed in fp32
    matmul_n: int = 0  # the GEMM's square matrices are n × n; 0: not recorded
    copy_bytes: int = 0  # the bytes of one copy (each read once and written once); 0: not recorded

    @property
    def where(self) -> str:
        """``node:gpuN``, the name a failure carries."""
        return f"{self.node}:{self.gpu}"


def measure_ceilings(
    ctx: TaskContext, *, config: ComputeConfig, backend: str | None = None, timeout_s: float = 300.0
) -> GpuCeiling:
    """GEMM TFLOP/s and copy TB/s of this task's GPU (or CPU), all tasks timed together."""
    # gloo is enough for the barriers and needs no GPU memory or NVLink set-up.
    with process_group(ctx, backend="gloo", timeout_s=timeout_s):
        return ceilings_here(ctx, config=config, backend=backend)


def ceilings_here(ctx: TaskContext, *, config: ComputeConfig, backend: str | None = None) -> GpuCeiling:
    """``measure_ceilings`` inside the job's process group, whatever its backend: its barriers
    start every task's timing together. What the GEMM and the copy kept cached is given back to
    the GPU, so a workload that follows in the same process finds the memory free."""
    import torch

    on_gpu = pick_backend(backend) == "nccl"
    device = device_for(ctx, "nccl" if on_gpu else "gloo")
    if on_gpu:
        torch.cuda.set_device(device)
    else:
        torch.set_num_threads(1)  # one core per stand-in rank: ranks must not slow each other
    tflops, checked = _gemm(config, device)
    tbps, copied = _copy(config, device)
    if on_gpu:
        torch.cuda.empty_cache()
    return GpuCeiling(
        node=ctx.hostname,
        gpu=gpu_label(device, ctx.local_rank),
        device_name=torch.cuda.get_device_name(device) if on_gpu else "cpu",
        dtype="bf16" if on_gpu else "fp32",
        matmul_tflops=tflops,
        copy_tbps=tbps,
        matmul_checked=checked,
        matmul_n=config.matmul_n,
        copy_bytes=copied,
    )


_CPU_ROUNDS = 5


def _timed(device: Any, run: Any, iters: int) -> float:
    """Seconds for ``iters`` calls of ``run``, started together with every other task."""
    import torch
    import torch.distributed as dist

    dist.barrier()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
        start.record()
        for _ in range(iters):
            run()
        end.record()
        end.synchronize()
        return float(start.elapsed_time(end)) / 1e3
    # CPU ranks standing in for GPUs share cores with each other (and, on a test cluster, with
    # other "nodes"); the fastest of a few rounds is the one least disturbed by preemption.
    best = math.inf
    for _ in range(_CPU_ROUNDS):
        t0 = time.perf_counter()
        for _ in range(iters):
            run()
        best = min(best, time.perf_counter() - t0)
    return best


def _gemm(config: ComputeConfig, device: Any) -> tuple[float, bool]:
    import torch

    n = config.matmul_n
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    g = torch.Generator(device=device).manual_seed(1234)
    # Random operands: zeros run measurably faster on the same GPU and would flatter it.
    a = torch.randn(n, n, device=device, dtype=dtype, generator=g)
    b = torch.randn(n, n, device=device, dtype=dtype, generator=g)
    c = torch.empty(n, n, device=device, dtype=dtype)
    for _ in range(config.warmup_iters):
        torch.matmul(a, b, out=c)
    seconds = _timed(device, lambda: torch.matmul(a, b, out=c), config.matmul_iters)
    # A number from a wrong product is void: check a corner against an fp32 reference.
    ref = a[:8].float() @ b[:, :8].float()
    got = c[:8, :8].float()
    checked = bool(torch.isfinite(got).all()) and float((got - ref).norm() / ref.norm()) < 2e-2
    return 2.0 * n**3 * config.matmul_iters / seconds / 1e12, checked


def _copy(config: ComputeConfig, device: Any) -> tuple[float, int]:
    """TB/s of a device-to-device copy, and the bytes one copy moves (``copy_bytes`` in whole fp32s)."""
    import torch

    numel = max(1, config.copy_bytes // 4)
    src = torch.rand(numel, device=device, dtype=torch.float32)
    dst = torch.empty_like(src)
    for _ in range(config.warmup_iters):
        dst.copy_(src)
    seconds = _timed(device, lambda: dst.copy_(src), config.copy_iters)
    moved = 2 * numel * 4 * config.copy_iters  # every byte is read once and written once
    return moved / seconds / 1e12, numel * 4


# --------------------------------------------------------------------------- login side, pure


def fractions_of_median(values: Mapping[str, float]) -> dict[str, float]:
    """Each value divided by the median of all ``values`` (one node's GPUs). A median of zero or
    less gives 0 for everyone: nothing healthy to compare with."""
    if not values:
        return {}
    median = statistics.median(values.values())
    if median <= 0:
        return dict.fromkeys(values, 0.0)
    return {k: v / median for k, v in values.items()}


def outliers(values: Mapping[str, float], min_fraction: float) -> list[tuple[str, float, float]]:
    """``(key, value, fraction of median)`` for every value under ``min_fraction`` of the median,
    worst first."""
    fractions = fractions_of_median(values)
    low = [(k, values[k], f) for k, f in fractions.items() if f < min_fraction]
    return sorted(low, key=lambda item: item[2])


def by_node(ceilings: list[GpuCeiling]) -> dict[str, list[GpuCeiling]]:
    """Ceilings grouped by node, each node's GPUs in index order."""
    out: dict[str, list[GpuCeiling]] = {}
    for c in ceilings:
        out.setdefault(c.node, []).append(c)
    for group in out.values():
        group.sort(key=lambda c: (len(c.gpu), c.gpu))
    return out


# --------------------------------------------------------------------------- burn


@dataclass(frozen=True)
class BurnResult:
    """One GPU's burn: NVML samples and the throttle reasons that fail it."""

    node: str
    gpu: str
    device_name: str
    seconds: float
    tflops: float
    samples: tuple[NvmlSample, ...]
    failing: tuple[tuple[float, tuple[str, ...]], ...]  # (time, reasons) of failing samples
    nvml_errors: tuple[str, ...]

    @property
    def where(self) -> str:
        """``node:gpuN``."""
        return f"{self.node}:{self.gpu}"


def burn(ctx: TaskContext, *, config: ComputeConfig, timeout_s: float = 300.0) -> BurnResult:
    """``config.burn_s`` seconds of back-to-back GEMMs on this task's GPU while NVML is read every
    second (clocks, temperature, power, throttle reasons). Needs a GPU and NVML."""
    import torch

    device = device_for(ctx, "nccl")
    torch.cuda.set_device(device)
    handle = nvml_handle(device)
    if handle is None:
        raise RuntimeError(f"{ctx.hostname}: NVML is not available; the burn cannot watch throttling")
    n = config.matmul_n
    a = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    b = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    c = torch.empty_like(a)
    watcher = ClockWatcher(handle)
    with process_group(ctx, backend="gloo", timeout_s=timeout_s):
        import torch.distributed as dist

        dist.barrier()
        watcher.start()
        t0 = time.monotonic()
        done = 0
        try:
            while time.monotonic() - t0 < config.burn_s:
                for _ in range(20):
                    torch.matmul(a, b, out=c)
                torch.cuda.synchronize(device)  # bounds the queue so the loop ends on time
                done += 20
        finally:
            samples = watcher.stop()
        seconds = time.monotonic() - t0
    failing = tuple((s.t_s, r) for s in samples if (r := failing_reasons(s.reasons_mask)))
    return BurnResult(
        node=ctx.hostname,
        gpu=gpu_label(device, ctx.local_rank),
        device_name=torch.cuda.get_device_name(device),
        seconds=seconds,
        tflops=2.0 * n**3 * done / seconds / 1e12,
        samples=tuple(samples),
        failing=failing,
        nvml_errors=tuple(watcher.errors),
    )

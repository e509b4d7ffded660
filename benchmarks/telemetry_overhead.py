"""What telemetry sampling costs the measured figure: the GEMM + all_reduce loop of the telemetry
check, timed with and without the sampler (on the node's first task, as in the suite), rounds in
alternating order, on every GPU of this machine through the suite's launcher (submitit's local
executor). Prints one JSON object.

    python benchmarks/telemetry_overhead.py                       # every GPU, NCCL, bf16 8192 GEMM + 256 MiB
    python benchmarks/telemetry_overhead.py --intervals 0.5,0.1   # also a 5x faster sampler
    python benchmarks/telemetry_overhead.py --tiny                # CPU/gloo check of this script

``overhead_pct`` is (median s/iteration with sampling / median without − 1) × 100 per interval;
``noise_pct`` is the spread of the unsampled rounds, the floor below which a difference means nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_gpucluster.launch import JobSpec
from pytest_gpucluster.launch.local_backend import LocalLauncher
from pytest_gpucluster.workloads.context import TaskContext
from pytest_gpucluster.workloads.inventory import node_name
from pytest_gpucluster.workloads.telemetry import DEFAULT_INTERVAL_S, Sampler

_PASS_ENV = ("NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST", "NVSHMEM_DISABLE_NVLS")

# --------------------------------------------------------------------------- the load (runs in the job)
# Defined in this script, so submitit pickles it by value: the nodes need only the package.

# CPU runs prove the path, not the speed: sizes are capped there.
_CPU_CAPS = {"matmul_n": 256, "all_reduce_bytes": 2**18}


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


def _loop(a: Any, b: Any, buf: Any, iterations: int) -> tuple[int, float]:
    """GEMM + all_reduce ``iterations`` times, timed from a barrier every rank passes."""
    import torch
    import torch.distributed as dist

    dist.barrier()
    start = time.perf_counter()
    for _ in range(iterations):
        torch.matmul(a, b)
        dist.all_reduce(buf)
    if buf.is_cuda:
        torch.cuda.synchronize(buf.device)
    return iterations, time.perf_counter() - start


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
    """Workload: a bf16 GEMM then an all_reduce on every rank, timed with and without the sampler on
    the node's first task, in alternating order (off, on, on, off, ...) so slow drift cancels."""
    from pytest_gpucluster.workloads.distributed import process_group

    modes = ["off"] + [f"{i:g}" for i in intervals]
    per: dict[str, list[float]] = {m: [] for m in modes}
    busy: dict[str, list[float]] = {m: [] for m in modes[1:]}
    gpus = 0
    with process_group(ctx, backend=backend, timeout_s=timeout_s) as used:
        device, a, b, buf = _operands(ctx, used, matmul_n, all_reduce_bytes)
        _loop(a, b, buf, max(5, iterations // 10))  # warm-up
        for r in range(rounds):
            for mode in modes if r % 2 == 0 else modes[::-1]:
                if mode == "off" or ctx.local_rank != 0:
                    done, elapsed = _loop(a, b, buf, iterations)
                else:
                    with Sampler(node_name(ctx), interval_s=float(mode)) as sampler:
                        done, elapsed = _loop(a, b, buf, iterations)
                    result = sampler.result()
                    busy[mode].append(round(result.busy_fraction, 5))
                    gpus = len(result.gpus)
                per[mode].append(elapsed / done)
    return OverheadResult(used, str(device), ctx.world_size, a.shape[0], buf.numel() * 4, iterations, per, busy, gpus)


# --------------------------------------------------------------------------- login side


def summarise(per: dict[str, list[float]], busy: dict[str, list[float]]) -> dict[str, object]:
    """Medians, overhead per interval against "off", and the noise of the unsampled rounds."""
    off = statistics.median(per["off"])
    out: dict[str, object] = {
        "median_s_per_iteration": {m: statistics.median(v) for m, v in per.items()},
        "noise_pct": round((max(per["off"]) - min(per["off"])) / off * 100, 3),
        "overhead_pct": {m: round((statistics.median(v) / off - 1) * 100, 3) for m, v in per.items() if m != "off"},
        "sampler_busy_pct": {m: round(statistics.median(v) * 100, 4) for m, v in busy.items() if v},
    }
    return out


def main(argv: list[str] | None = None) -> int:
    """Parse flags, run the comparison on every GPU at once, print JSON."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--gpus", type=int, default=None, help="GPUs (ranks) to use (default: all CUDA sees)")
    p.add_argument("--rounds", type=int, default=8, help="rounds per mode (alternating order)")
    p.add_argument("--iters", type=int, default=500, help="GEMM + all_reduce iterations per round")
    p.add_argument("--n", type=int, default=8192, help="GEMM size n (bf16 n×n×n)")
    p.add_argument("--all-reduce-mib", type=float, default=256.0)
    p.add_argument("--intervals", default="0.5", help="sampler intervals in s, comma-separated")
    p.add_argument("--tiny", action="store_true", help="CPU/gloo check of this script (2 ranks, small sizes)")
    args = p.parse_args(argv)
    intervals = tuple(float(x) for x in args.intervals.split(","))

    if args.tiny:
        gpus, tasks, rounds, iters = 0, 2, args.rounds, min(args.iters, 200)
    else:
        import torch

        gpus = args.gpus or torch.cuda.device_count()
        tasks, rounds, iters = max(1, gpus), args.rounds, args.iters
    env = {k: os.environ[k] for k in _PASS_ENV if k in os.environ}
    launcher = LocalLauncher(folder=Path(tempfile.mkdtemp(prefix="gpucluster-bench-")), env=env, queue_timeout_s=120)
    spec = JobSpec(name="bench-telemetry", tasks_per_node=tasks, gpus_per_node=gpus, timeout_min=20)
    results = launcher.run(
        telemetry_overhead,
        spec,
        rounds=rounds,
        iterations=iters,
        matmul_n=args.n,
        all_reduce_bytes=int(args.all_reduce_mib * 2**20),
        intervals=intervals,
    )
    first = results[0].value
    print(
        json.dumps(
            {
                "benchmark": "telemetry_overhead",
                "backend": first.backend,
                "device": first.device,
                "ranks": first.world_size,
                "gpus_sampled": first.gpus_sampled,
                "matmul_n": first.matmul_n,
                "all_reduce_bytes": first.all_reduce_bytes,
                "iterations_per_round": first.iterations,
                "rounds": rounds,
                **summarise(first.seconds_per_iteration, first.sampler_busy_fraction),
                "seconds_per_iteration": first.seconds_per_iteration,
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

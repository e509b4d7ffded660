"""Per-GPU ceilings as the acceptance suite measures them, as JSON lines: bf16 GEMM TFLOP/s on
random data and device copy TB/s (read + write), every GPU of this machine at once, through the
suite's launcher with submitit's local executor.

    python benchmarks/compute_ceiling.py --gpus 4 --n 8192 --iters 50 --copy-gib 4

One line per GPU, then one line for the node (median, min, and each GPU's fraction of the median).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

from pytest_gpucluster.launch import JobSpec
from pytest_gpucluster.launch.local_backend import LocalLauncher
from pytest_gpucluster.workloads.compute import TINY, ComputeConfig, fractions_of_median, measure_ceilings

_PASS_ENV = ("NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST", "NVSHMEM_DISABLE_NVLS")


def main(argv: list[str] | None = None) -> int:
    """Parse flags, measure every GPU at once, print JSON lines."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--gpus", type=int, default=None, help="GPUs to use (default: all CUDA sees)")
    p.add_argument("--n", type=int, default=ComputeConfig.matmul_n, help="GEMM size n (n×n×n)")
    p.add_argument("--iters", type=int, default=ComputeConfig.matmul_iters)
    p.add_argument("--copy-gib", type=float, default=ComputeConfig.copy_bytes / 2**30)
    p.add_argument("--copy-iters", type=int, default=ComputeConfig.copy_iters)
    p.add_argument("--tiny", action="store_true", help="CPU-sized check of this script")
    args = p.parse_args(argv)

    if args.tiny:
        cfg, gpus, tasks = TINY, 0, 2
    else:
        import torch

        gpus = args.gpus or torch.cuda.device_count()
        tasks = max(1, gpus)
        cfg = ComputeConfig(
            matmul_n=args.n, matmul_iters=args.iters, copy_bytes=int(args.copy_gib * 2**30), copy_iters=args.copy_iters
        )
    env = {k: os.environ[k] for k in _PASS_ENV if k in os.environ}
    launcher = LocalLauncher(folder=Path(tempfile.mkdtemp(prefix="gpucluster-bench-")), env=env, queue_timeout_s=120)
    spec = JobSpec(name="bench-compute", tasks_per_node=tasks, gpus_per_node=gpus, timeout_min=10)
    results = launcher.run(measure_ceilings, spec, config=cfg)
    values = [r.value for r in results]
    for v in values:
        print(
            json.dumps(
                {
                    "where": v.where,
                    "device": v.device_name,
                    "dtype": v.dtype,
                    "n": cfg.matmul_n,
                    "matmul_tflops": round(v.matmul_tflops, 1),
                    "copy_tbps": round(v.copy_tbps, 3),
                    "matmul_checked": v.matmul_checked,
                }
            ),
            flush=True,
        )
    mm = {v.where: v.matmul_tflops for v in values}
    cp = {v.where: v.copy_tbps for v in values}
    print(
        json.dumps(
            {
                "node": values[0].node,
                "gpus": len(values),
                "matmul_tflops_median": round(statistics.median(mm.values()), 1),
                "matmul_tflops_min": round(min(mm.values()), 1),
                "copy_tbps_median": round(statistics.median(cp.values()), 3),
                "copy_tbps_min": round(min(cp.values()), 3),
                "matmul_fraction_of_median": {k: round(f, 3) for k, f in fractions_of_median(mm).items()},
                "copy_fraction_of_median": {k: round(f, 3) for k, f in fractions_of_median(cp).items()},
                "job_id": results[0].job_id,
            }
        ),
        flush=True,
    )
    return 0 if all(v.matmul_checked for v in values) else 1


if __name__ == "__main__":
    sys.exit(main())

"""Training throughput, MFU and scaling of the acceptance suite's decoder, as JSON lines.

Runs through the suite's own launcher with submitit's local executor on this machine: for each
configuration (micro-batch × compile), one job on 1 GPU (no wrapper: the baseline) and one job
per larger GPU count running DDP then FSDP2. One JSON line per configuration, mode and GPU count:

    python benchmarks/training_mfu.py --gpus 1,4 --micro-batch 4,8 --compile off,on

Fields: tokens_per_s_per_gpu, mfu_pct (6·N + 12·L·d·S per token against the GPU's dense bf16 peak),
step_p50_ms, step_p95_ms, peak_mem_gib, scaling_efficiency_pct (per-GPU throughput ÷ the same
configuration's 1-GPU throughput), loss_first/loss_last, problems.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

from pytest_gpucluster.launch import JobSpec
from pytest_gpucluster.launch.local_backend import LocalLauncher
from pytest_gpucluster.launch.submitit_backend import submitit_logs_to_stderr
from pytest_gpucluster.workloads.training import TINY, TrainConfig, TrainingSummary, summarise, train

# Keep NVLink SHARP off where the host asks for it (shared 4×H200 test machine).
_PASS_ENV = ("NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST", "NVSHMEM_DISABLE_NVLS", "NCCL_DEBUG")


def _ints(text: str) -> list[int]:
    return [int(v) for v in text.split(",") if v.strip()]


def _bools(text: str) -> list[bool]:
    return [v.strip().lower() in ("on", "1", "true", "yes") for v in text.split(",") if v.strip()]


def _line(cfg: TrainConfig, s: TrainingSummary, base: TrainingSummary | None, gpus: int, job: str) -> dict[str, Any]:
    eff = 100.0 * s.tokens_per_s_per_gpu / base.tokens_per_s_per_gpu if base and s.mode != "single" else None
    return {
        "mode": s.mode,
        "gpus": gpus,
        "micro_batch": cfg.micro_batch,
        "grad_accum": cfg.grad_accum,
        "compile": cfg.compile,
        "ddp_bucket_mb": cfg.ddp_bucket_mb,
        "reduce_dtype": cfg.grad_reduce_dtype,
        "fsdp_param_dtype": cfg.fsdp_param_dtype,
        "device": s.device_name,
        "dtype": s.dtype,
        "params": s.n_params,
        "tokens_per_s_per_gpu": round(s.tokens_per_s_per_gpu, 1),
        "mfu_pct": None if s.mfu_percent is None else round(s.mfu_percent, 2),
        "step_p50_ms": round(1e3 * s.step_p50_s, 2),
        "step_p95_ms": round(1e3 * s.step_p95_s, 2),
        "peak_mem_gib": round(s.peak_memory_gib, 2),
        "scaling_efficiency_pct": None if eff is None else round(eff, 2),
        "loss_first": round(s.losses[0], 4),
        "loss_last": round(s.losses[-1], 4),
        "problems": list(s.problems),
        "job_id": job,
    }


def main(argv: list[str] | None = None) -> int:
    """Parse flags, run every configuration, print one JSON line per result."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--gpus", default="1,4", help="GPU counts, comma-separated; 1 is the baseline (default 1,4)")
    p.add_argument("--micro-batch", default="4", help="micro-batch sizes, comma-separated (default 4)")
    p.add_argument("--compile", default="off", help="off, on or off,on (torch.compile of each block)")
    p.add_argument("--modes", default="ddp,fsdp", help="wrappings at more than one GPU (default ddp,fsdp)")
    p.add_argument(
        "--grad-accum", default=str(TrainConfig.grad_accum), help="micro-batches per optimiser step, comma-separated"
    )
    p.add_argument("--steps", type=int, default=TrainConfig.steps)
    p.add_argument("--warmup", type=int, default=TrainConfig.warmup_steps)
    p.add_argument("--bucket-mb", default=str(TrainConfig.ddp_bucket_mb), help="DDP bucket sizes, comma-separated")
    p.add_argument("--reduce-dtype", default="fp32", help="gradient reduction dtype(s): fp32, bf16 or fp32,bf16")
    p.add_argument("--fsdp-param-dtype", default="fp32", help="FSDP parameter dtype(s): fp32, bf16 or fp32,bf16")
    p.add_argument("--tiny", action="store_true", help="the tiny CPU model (a quick check of this script)")
    p.add_argument("--timeout-min", type=int, default=15)
    args = p.parse_args(argv)
    submitit_logs_to_stderr()  # stdout is JSON lines only

    base_cfg = TINY if args.tiny else TrainConfig()
    base_cfg = replace(base_cfg, steps=args.steps, warmup_steps=args.warmup)
    comm = [
        (b, r, f)
        for b in _ints(args.bucket_mb)
        for r in args.reduce_dtype.split(",")
        for f in args.fsdp_param_dtype.split(",")
    ]
    env = {k: os.environ[k] for k in _PASS_ENV if k in os.environ}
    folder = Path(tempfile.mkdtemp(prefix="gpucluster-bench-"))
    launcher = LocalLauncher(folder=folder, env=env, queue_timeout_s=120)
    modes = tuple(m for m in args.modes.split(",") if m)
    status = 0
    for mb, accum in [(m, a) for m in _ints(args.micro_batch) for a in _ints(args.grad_accum)]:
        for compiled in _bools(args.compile):
            base: TrainingSummary | None = None
            shapes = [(g, c) for g in sorted(_ints(args.gpus)) for c in (comm[:1] if g == 1 else comm)]
            for gpus, (bucket, reduce_dtype, param_dtype) in shapes:
                cfg = replace(
                    base_cfg,
                    micro_batch=mb,
                    grad_accum=accum,
                    compile=compiled,
                    ddp_bucket_mb=bucket,
                    grad_reduce_dtype=reduce_dtype,
                    fsdp_param_dtype=param_dtype,
                )
                spec = JobSpec(
                    name=f"bench-train-{gpus}gpu", tasks_per_node=gpus, gpus_per_node=gpus, timeout_min=args.timeout_min
                )
                run_modes = ("single",) if gpus == 1 else modes
                try:
                    results = launcher.run(train, spec, config=cfg, modes=run_modes)
                except Exception as exc:  # one failed configuration must not hide the others
                    print(
                        json.dumps(
                            {
                                "gpus": gpus,
                                "micro_batch": mb,
                                "grad_accum": accum,
                                "compile": compiled,
                                "error": str(exc)[-2000:],
                            }
                        ),
                        flush=True,
                    )
                    status = 1
                    continue
                for i, mode in enumerate(run_modes):
                    summary = summarise([r.value[i] for r in results], cfg)
                    if mode == "single":
                        base = summary
                    print(json.dumps(_line(cfg, summary, base, gpus, results[0].job_id)), flush=True)
    return status


if __name__ == "__main__":
    sys.exit(main())

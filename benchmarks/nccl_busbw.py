"""Collective busbw through the launcher, compared with nccl-tests on the 4×H200 test machine.

Runs ``workloads.collectives.collective_sweeps`` on one node with 2 and 4 GPUs (submitit's local
executor; ``--cluster NAME`` submits through that profile's Slurm instead) and prints JSON lines:
one per (op, GPUs, size) with busbw and, where docs' reference table has nccl-tests' figure, the
ratio; one per GPU count with the wall time of the whole sweep; a last one with the verdict
against the targets (ratio ≥ 0.98 at every size ≥ 64 MiB; the 4-GPU sweep of all_reduce,
all_gather and reduce_scatter within 60 s).

On the test machine, NVLink SHARP must stay off:

    NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 \\
        python benchmarks/nccl_busbw.py --gpus 2 4
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from pytest_gpucluster.config import NcclSettings, load, parse_bytes
from pytest_gpucluster.launch import JobSpec
from pytest_gpucluster.launch.local_backend import LocalLauncher
from pytest_gpucluster.launch.slurm_backend import SlurmLauncher
from pytest_gpucluster.launch.submitit_backend import SubmititLauncher, submitit_logs_to_stderr
from pytest_gpucluster.workloads.collectives import collective_sweeps

MiB, GiB = 2**20, 2**30
# nccl-tests 2.19 on the 4×H200 test machine (NV18, NCCL 2.28.9, NVLS off), busbw GB/s:
# /work/shared/reference/numbers.md, "Measured here".
REFERENCE: dict[tuple[str, int], dict[int, float]] = {
    ("all_reduce", 4): {64 * MiB: 313.9, 256 * MiB: 340.1, 1 * GiB: 353.7, 4 * GiB: 362.5},
    ("all_gather", 4): {64 * MiB: 266.9, 256 * MiB: 304.7, 1 * GiB: 326.2, 4 * GiB: 344.5},
    ("reduce_scatter", 4): {64 * MiB: 268.9, 256 * MiB: 304.8, 1 * GiB: 326.7, 4 * GiB: 345.0},
    ("all_reduce", 2): {64 * MiB: 268.3, 256 * MiB: 298.1, 1 * GiB: 324.9, 4 * GiB: 345.4},
}
TARGET_RATIO = 0.98
TARGET_WALL_S = 60.0
NO_NVLS = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}


def _emit(record: dict[str, Any]) -> None:
    print(json.dumps(record), flush=True)


def launcher_for(cluster: str | None, thresholds: Path, env: dict[str, str], *, prefix: str) -> SubmititLauncher:
    """The local executor, or the Slurm of profile ``cluster`` (job files on its shared_fs)."""
    folder = Path(tempfile.mkdtemp(prefix=prefix))
    if not cluster:
        return LocalLauncher(folder=folder, env=env, queue_timeout_s=60)
    profile = load(thresholds).profile(cluster, option="--cluster")
    if profile.shared_fs:
        folder = Path(profile.shared_fs) / ".pytest-gpucluster" / "bench" / folder.name
        folder.mkdir(parents=True, exist_ok=True)
    if profile.slurm_conf:
        os.environ["SLURM_CONF"] = profile.slurm_conf
    if profile.executor == "local":
        return LocalLauncher(folder=folder, env={**profile.env, **env}, queue_timeout_s=profile.queue_timeout_s)
    return SlurmLauncher(
        folder=folder,
        partition=profile.partition,
        account=profile.account,
        env={**profile.env, **env},
        queue_timeout_s=profile.queue_timeout_s,
    )


def sweep_arguments(
    ap: argparse.ArgumentParser, *, min_bytes: str, max_bytes: str, warmup_iters: int, iters: int
) -> None:
    """The options both NCCL benchmarks take: the sweep's shape and where its jobs run."""
    ap.add_argument("--gpus", type=int, nargs="+", default=[2, 4])
    ap.add_argument("--ops", nargs="+", default=["all_reduce", "all_gather", "reduce_scatter"])
    ap.add_argument("--min-bytes", default=min_bytes)
    ap.add_argument("--max-bytes", default=max_bytes)
    ap.add_argument("--warmup-iters", type=int, default=warmup_iters)
    ap.add_argument("--iters", type=int, default=iters)
    ap.add_argument("--cluster", default=None, help="profile in thresholds.toml to submit through (Slurm)")
    ap.add_argument("--thresholds", default="thresholds.toml")
    ap.add_argument("--timeout-min", type=int, default=10)


def main(argv: list[str] | None = None) -> int:
    """Run the sweeps, print JSON lines, exit 1 when a target is missed."""
    defaults = NcclSettings()
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sweep_arguments(
        ap,
        min_bytes=str(defaults.min_bytes),
        max_bytes=str(defaults.max_bytes),
        warmup_iters=defaults.warmup_iters,
        iters=defaults.iters,
    )
    args = ap.parse_args(argv)
    submitit_logs_to_stderr()  # stdout is JSON lines only
    min_bytes, max_bytes = parse_bytes(args.min_bytes, "--min-bytes"), parse_bytes(args.max_bytes, "--max-bytes")

    env = {**NO_NVLS, **{k: os.environ[k] for k in NO_NVLS if k in os.environ}}
    launcher = launcher_for(args.cluster, Path(args.thresholds), env, prefix="nccl-busbw-")

    missed: list[str] = []
    for n in args.gpus:
        spec = JobSpec(
            name=f"nccl-busbw-{n}gpu", nodes=1, tasks_per_node=n, gpus_per_node=n, timeout_min=args.timeout_min
        )
        t0 = time.perf_counter()
        results = launcher.run(
            collective_sweeps,
            spec,
            ops=tuple(args.ops),
            min_bytes=min_bytes,
            max_bytes=max_bytes,
            warmup_iters=args.warmup_iters,
            iters=args.iters,
            groups="world",
        )
        wall = time.perf_counter() - t0
        sweeps = [s for r in results for s in r.value]
        for sweep in sweeps:
            if not sweep.correct:
                missed.append(f"{sweep.op} ×{n}: wrong results: {sweep.correctness_problems()[:2]}")
            ref = REFERENCE.get((sweep.op, n), {})
            by_size: dict[int, dict[str, float]] = {}
            for row in sweep.rows:
                by_size.setdefault(row.size_bytes, {})["ip" if row.in_place else "oop"] = row.busbw
                by_size[row.size_bytes]["time_us" + ("_ip" if row.in_place else "_oop")] = row.time_us
            for size, v in sorted(by_size.items()):
                busbw = v.get("oop", v.get("ip", float("nan")))  # nccl-tests' first column
                record: dict[str, Any] = {
                    "op": sweep.op,
                    "n_gpus": n,
                    "size": size,
                    "busbw": round(busbw, 2),
                    "busbw_out_of_place": round(v["oop"], 2) if "oop" in v else None,
                    "busbw_in_place": round(v["ip"], 2) if "ip" in v else None,
                    "backend": sweep.backend,
                    "nccl": sweep.nccl_version,
                }
                if size in ref:
                    record["nccl_tests"] = ref[size]
                    record["ratio"] = round(busbw / ref[size], 4)
                    if size >= 64 * MiB and record["ratio"] < TARGET_RATIO:
                        missed.append(f"{sweep.op} ×{n} at {size // MiB} MiB: ratio {record['ratio']}")
                _emit(record)
        _emit(
            {
                "summary": "sweep",
                "n_gpus": n,
                "ops": args.ops,
                "min_bytes": min_bytes,
                "max_bytes": max_bytes,
                "iters": args.iters,
                "warmup_iters": args.warmup_iters,
                "wall_s": round(wall, 2),
                "implementations": {s.op: s.implementation for s in sweeps},
            }
        )
        if n == 4 and wall > TARGET_WALL_S:
            missed.append(f"4-GPU sweep took {wall:.1f} s > {TARGET_WALL_S:.0f} s")
    _emit({"summary": "targets", "ok": not missed, "missed": missed})
    return 0 if not missed else 1


if __name__ == "__main__":
    sys.exit(main())

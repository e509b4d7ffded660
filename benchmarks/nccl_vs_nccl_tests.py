"""Our collective busbw against nccl-tests, alternating, several rounds, through the same launcher.

A single reading of either tool moves by a few per cent between runs on one machine, so one
ours-then-theirs pair cannot tell a 2 % gap from noise. This runs, per round and per GPU count,
our sweep (``workloads.collectives.collective_sweeps``) and then nccl-tests' binaries
(``workloads.nccl_tests.run_nccl_tests``, ``-g N`` in one task) as jobs of the same shape on the
same node, and prints JSON lines: every reading, then per (op, GPUs, size, placement) the median
of each tool over the rounds, their ratio and each round's ratio, and a last line with the
verdict (median ratio ≥ 0.98 at every size ≥ 64 MiB, out-of-place and in-place each against
nccl-tests' own column).

    NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 \\
    LD_LIBRARY_PATH=<dir of the libnccl nccl-tests was built against> \\
        python benchmarks/nccl_vs_nccl_tests.py --cluster testbox --nccl-tests /path/to/nccl-tests/build \\
            --gpus 2 4 --rounds 3
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from nccl_busbw import NO_NVLS, launcher_for, sweep_arguments  # benchmarks/ is on the path when run as a script

from pytest_gpucluster.config import parse_bytes
from pytest_gpucluster.launch import JobSpec
from pytest_gpucluster.launch.submitit_backend import submitit_logs_to_stderr
from pytest_gpucluster.workloads.busbw import SweepResult
from pytest_gpucluster.workloads.collectives import collective_sweeps
from pytest_gpucluster.workloads.nccl_tests import run_nccl_tests

MiB = 2**20
TARGET_RATIO = 0.98
Cell = tuple[str, int, int, str]  # op, GPUs, size, "oop" | "ip"


def _emit(record: dict[str, Any]) -> None:
    print(json.dumps(record), flush=True)


def _cells(sweeps: list[SweepResult], n: int) -> dict[Cell, float]:
    return {(s.op, n, row.size_bytes, "ip" if row.in_place else "oop"): row.busbw for s in sweeps for row in s.rows}


def main(argv: list[str] | None = None) -> int:
    """Alternate the two tools for ``--rounds`` rounds; exit 1 when a median ratio misses."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nccl-tests", required=True, help="nccl-tests build directory (all_reduce_perf, ...)")
    sweep_arguments(ap, min_bytes="64MiB", max_bytes="4GiB", warmup_iters=5, iters=20)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args(argv)
    submitit_logs_to_stderr()  # stdout is JSON lines only
    lo, hi = parse_bytes(args.min_bytes, "--min-bytes"), parse_bytes(args.max_bytes, "--max-bytes")
    env = {**NO_NVLS, **{k: os.environ[k] for k in (*NO_NVLS, "LD_LIBRARY_PATH") if k in os.environ}}
    launcher = launcher_for(args.cluster, Path(args.thresholds), env, prefix="nccl-vs-")
    sweep = {"min_bytes": lo, "max_bytes": hi, "warmup_iters": args.warmup_iters, "iters": args.iters}
    ours: dict[Cell, list[float]] = {}
    theirs: dict[Cell, list[float]] = {}
    problems: list[str] = []
    for rnd in range(1, args.rounds + 1):
        for n in args.gpus:
            spec = JobSpec(
                name=f"nccl-vs-{n}gpu", nodes=1, tasks_per_node=n, gpus_per_node=n, timeout_min=args.timeout_min
            )
            t0 = time.perf_counter()
            got = [
                s
                for r in launcher.run(collective_sweeps, spec, ops=tuple(args.ops), groups="world", **sweep)
                for s in r.value
            ]
            ours_s = time.perf_counter() - t0
            one = JobSpec(
                name=f"nccl-tests-{n}gpu", nodes=1, tasks_per_node=1, gpus_per_node=n, timeout_min=args.timeout_min
            )
            t0 = time.perf_counter()
            ref = launcher.run(
                run_nccl_tests, one, nccl_tests_dir=args.nccl_tests, ops=tuple(args.ops), gpus=n, **sweep
            )[0].value
            theirs_s = time.perf_counter() - t0
            problems += [f"round {rnd}, ours {s.op} ×{n}: wrong results" for s in got if not s.correct]
            problems += [f"round {rnd}, nccl-tests {s.op} ×{n}: {s.error}" for s in ref if s.error]
            a, b = _cells(got, n), _cells(ref, n)
            for cell, value in a.items():
                ours.setdefault(cell, []).append(value)
            for cell, value in b.items():
                theirs.setdefault(cell, []).append(value)
            versions = {
                "nccl": sorted({str(s.nccl_version) for s in got}),
                "nccl_tests": sorted({str(s.nccl_version) for s in ref}),
            }
            _emit(
                {
                    "round": rnd,
                    "n_gpus": n,
                    "ours_s": round(ours_s, 1),
                    "nccl_tests_s": round(theirs_s, 1),
                    **versions,
                    "readings": {
                        f"{op}|{size}|{where}": [
                            round(a.get((op, n, size, where), float("nan")), 2),
                            round(b.get((op, n, size, where), float("nan")), 2),
                        ]
                        for (op, _, size, where) in sorted(set(a) | set(b))
                    },
                }
            )
    missed: list[str] = []
    for cell in sorted(set(ours) & set(theirs)):
        op, n, size, where = cell
        mo, mt = statistics.median(ours[cell]), statistics.median(theirs[cell])
        ratio = mo / mt if mt else float("nan")
        per_round = [round(x / y, 3) for x, y in zip(ours[cell], theirs[cell], strict=False) if y]
        _emit(
            {
                "op": op,
                "n_gpus": n,
                "size": size,
                "placement": where,
                "ours_median": round(mo, 2),
                "nccl_tests_median": round(mt, 2),
                "ratio_of_medians": round(ratio, 4),
                "ratios": per_round,
                "ours": [round(x, 2) for x in ours[cell]],
                "nccl_tests": [round(x, 2) for x in theirs[cell]],
            }
        )
        if size >= 64 * MiB and not ratio >= TARGET_RATIO:
            missed.append(f"{op} ×{n} {where} at {size // MiB} MiB: {ratio:.3f}")
    _emit(
        {
            "summary": "targets",
            "rounds": args.rounds,
            "ok": not missed and not problems,
            "missed": missed,
            "problems": problems,
        }
    )
    return 0 if not missed and not problems else 1


if __name__ == "__main__":
    sys.exit(main())

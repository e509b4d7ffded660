"""Back-to-back jobs through the launcher on one node: how long from one job's workload end to the
next job's first process, and from submission to the first process (Slurm's part), after light
jobs and after jobs that held every GPU with memory in use.

Each job has one task per GPU (``--gpus``, default 4, with ``--cpus-per-task``). A light job returns
at once; a heavy one sets up a gloo group, runs a bf16 GEMM of 8192² and copies 4 GiB on its GPU.
Prints one JSON line per job. With ``--import-profile`` it runs one light job instead and prints
the slowest imports of its first task (start it with PYTHONPROFILEIMPORTTIME=1 in the environment,
which sbatch passes on to the job).

    SLURM_CONF=... python3 benchmarks/job_turnaround.py /shared/folder [--partition debug]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from pytest_gpucluster.launch import JobSpec
from pytest_gpucluster.launch.slurm_backend import SlurmLauncher


def heavy(ctx: Any) -> bool:
    """Hold the task's GPU with memory in use, as the measuring jobs do."""
    import torch
    import torch.distributed as dist

    from pytest_gpucluster.workloads.distributed import process_group

    torch.cuda.set_device(ctx.local_rank)
    with process_group(ctx, backend="gloo", timeout_s=60):
        a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
        torch.matmul(a, a)
        src = torch.rand(2**30, device="cuda")
        src.clone()
        torch.cuda.synchronize()
        dist.barrier()
    return True


def light(ctx: Any) -> int:
    """Return at once."""
    return os.getpid()


SEQUENCE = ["light", "light", "heavy", "heavy", "light", "heavy", "light"]


def main(argv: list[str] | None = None) -> int:
    """Run the sequence (or one light job with ``--import-profile``) and print JSON lines."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path, help="a job folder on the shared filesystem")
    parser.add_argument("--partition", default="debug")
    parser.add_argument("--gpus", type=int, default=4)
    parser.add_argument("--cpus-per-task", type=int, default=8)
    parser.add_argument("--import-profile", action="store_true")
    args = parser.parse_args(argv)
    launcher = SlurmLauncher(folder=args.folder, partition=args.partition, poll_s=0.25)
    kinds = {"light": light, "heavy": heavy}
    previous_end = None
    for name in ["light"] if args.import_profile else SEQUENCE:
        spec = JobSpec(
            name,
            nodes=1,
            tasks_per_node=args.gpus,
            gpus_per_node=args.gpus,
            timeout_min=5,
            cpus_per_task=args.cpus_per_task,
        )
        job = launcher.submit(kinds[name], spec)
        results = job.results()
        process = min(r.process_started for r in results)
        start, end = min(r.started for r in results), max(r.ended for r in results)
        print(
            json.dumps(
                {
                    "job": name,
                    "submit_to_process_s": round(process - job.submitted_epoch, 3),
                    "start_up_s": round(start - process, 3),
                    "run_s": round(end - start, 3),
                    "prev_end_to_process_s": round(process - previous_end, 3) if previous_end else None,
                    "seen_after_end_s": round(time.time() - end, 3),
                }
            ),
            flush=True,
        )
        previous_end = end
    if args.import_profile:
        err = max(args.folder.glob("*/*_0_log.err"), key=lambda p: p.stat().st_mtime)
        rows = [
            line
            for line in err.read_text().splitlines()
            if line.startswith("import time:") and line.split("|")[1].strip().isdigit()
        ]
        rows.sort(key=lambda line: int(line.split("|")[1]))
        print("\n".join(rows[-25:]))
    return 0


if __name__ == "__main__":
    sys.exit(main())

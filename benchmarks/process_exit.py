"""How long a GPU process takes to exit once its work is done: Python's normal shutdown against
``os._exit`` (what the launcher does once a task's result is written, launch/node.py).

Starts one process per GPU (4 by default) that imports torch, joins a process group (gloo or
NCCL), runs a bf16 GEMM of 8192², copies 4 GiB, runs one collective, destroys the group, prints
the time and then exits either way. Prints one JSON line per try: the exit lag is from the last
process's "done" to the last process gone. A slow exit delays the next job on the node: Slurm
frees the GPUs only when every process of the job has ended.

    NCCL_NVLS_ENABLE=0 python3 benchmarks/process_exit.py [--gpus 4] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

CHILD = r"""
import json, os, sys, time
t0 = time.time()
import torch, torch.distributed as dist
t1 = time.time()
rank, world, mode, backend, port = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
torch.cuda.set_device(rank)
dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
b = torch.randn_like(a)
c = a @ b
src = torch.rand(2**30, device="cuda")
dst = src.clone()
if backend == "nccl":
    x = torch.ones(2**28, device="cuda")
    dist.all_reduce(x)
else:
    dist.barrier()
torch.cuda.synchronize()
dist.destroy_process_group()
t2 = time.time()
print(json.dumps({"rank": rank, "import_s": t1 - t0, "end": t2}), flush=True)
if mode == "fast":
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
"""


def once(mode: str, backend: str, port: int, world: int, timeout_s: float = 120.0) -> dict[str, object]:
    """One try: ``world`` processes, each exiting the ``mode`` way ("normal" or "fast")."""
    argv = [[sys.executable, "-c", CHILD, str(r), str(world), mode, backend, str(port)] for r in range(world)]
    procs = [subprocess.Popen(a, stdout=subprocess.PIPE, text=True) for a in argv]
    ends, imports, exits = [], [], []
    try:
        for p in procs:
            line = p.stdout.readline() if p.stdout else ""
            done = json.loads(line)
            ends.append(done["end"])
            imports.append(done["import_s"])
        for p in procs:
            p.wait(timeout=timeout_s)
            exits.append(time.time())
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    return {
        "mode": mode,
        "backend": backend,
        "exit_lag_s": round(max(exits) - max(ends), 3),
        "import_torch_s": round(max(imports), 3),
    }


def main(argv: list[str] | None = None) -> int:
    """Alternate normal and fast exits, for gloo and NCCL, ``--repeat`` times."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int, default=4)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    port = 29600
    for _ in range(args.repeat):
        for backend in ("gloo", "nccl"):
            for mode in ("normal", "fast"):
                port += 1
                print(json.dumps(once(mode, backend, port, args.gpus)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

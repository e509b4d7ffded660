"""What a task's start-up costs on a node: the imports every task of every job makes before its
workload runs (submitit's task entry, which loads numpy first, and the launcher's node side).

Starts ``--procs`` Python processes at once, each importing what a task imports and printing the
CPU seconds it used, for each environment variant given (by default the machine's environment
and the same with ``OPENBLAS_NUM_THREADS=1``: numpy's OpenBLAS starts a thread per core when
imported, in every task). Prints one JSON line per variant: median and slowest wall and CPU.

    python benchmarks/task_start_up.py --procs 1 16 128
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

PROBE = (
    "import os, time; t0 = time.time(); "
    "import submitit.core._submit, pytest_gpucluster.launch.node, pytest_gpucluster.workloads.placement; "
    "c = os.times(); print(c.user + c.system, time.time() - t0)"
)
VARIANTS = {"as is": {}, "OPENBLAS_NUM_THREADS=1": {"OPENBLAS_NUM_THREADS": "1"}}


def measure(procs: int, extra: dict[str, str]) -> dict[str, float]:
    env = {**os.environ, **extra}
    t0 = time.monotonic()
    running = [
        subprocess.Popen([sys.executable, "-c", PROBE], env=env, stdout=subprocess.PIPE, text=True)
        for _ in range(procs)
    ]
    outs = [p.communicate(timeout=300)[0].split() for p in running]
    wall = time.monotonic() - t0
    cpu = [float(o[0]) for o in outs]
    imports = [float(o[1]) for o in outs]
    return {
        "procs": procs,
        "all_done_s": round(wall, 2),
        "cpu_median_s": round(statistics.median(cpu), 3),
        "cpu_max_s": round(max(cpu), 3),
        "import_wall_median_s": round(statistics.median(imports), 3),
        "import_wall_max_s": round(max(imports), 3),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--procs", type=int, nargs="+", default=[1, 16, 128])
    parser.add_argument("--repeat", type=int, default=3, help="runs per point; the median run is printed")
    args = parser.parse_args()
    print(json.dumps({"cpus": os.cpu_count(), "python": sys.version.split()[0]}))
    for procs in args.procs:
        for name, extra in VARIANTS.items():
            runs = sorted((measure(procs, extra) for _ in range(args.repeat)), key=lambda r: r["all_done_s"])
            print(json.dumps({"variant": name, **runs[len(runs) // 2]}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The storage check's write/read stream against fio on the same directory, as JSON lines: the
suite's own Python stream (``workloads.storage``), then fio's sequential write and read of a file
of the same size, in the same blocks, with O_DIRECT where the stream used it, one job, queue depth
one (as the stream writes). Each file is removed afterwards.

    python benchmarks/storage_vs_fio.py /mnt/shared/scratch --size 4GiB --block 16MiB --repeat 3

One line per engine and repetition, then one line with each engine's median and their ratio.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from pytest_gpucluster.config.tables import parse_bytes
from pytest_gpucluster.workloads.storage import DIRECT, StorageConfig, measure_stream


def fio(directory: Path, size: int, block: int, direct: bool, rw: str, timeout_s: float) -> float:
    """fio's bandwidth in MB/s for one sequential ``rw`` (write or read) of ``size`` bytes."""
    binary = shutil.which("fio")
    if binary is None:
        raise SystemExit("fio is not installed (Debian: apt-get install fio)")
    argv = [
        binary,
        "--name=stream",
        f"--directory={directory}",
        "--filename=fio-stream.bin",
        f"--rw={rw}",
        f"--size={size}",
        f"--bs={block}",
        f"--direct={int(direct)}",
        "--ioengine=psync",
        "--numjobs=1",
        "--end_fsync=1",
        "--output-format=json",
    ]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, check=True).stdout
    job = json.loads(out)["jobs"][0]
    return float(job["write" if rw == "write" else "read"]["bw_bytes"]) / 1e6


def main(argv: list[str] | None = None) -> int:
    """Parse flags, measure both engines ``--repeat`` times, print JSON lines."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("directory", type=Path, help="a directory on the filesystem to measure")
    p.add_argument("--size", default="1GiB")
    p.add_argument("--block", default="16MiB")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--timeout-s", type=float, default=600.0)
    args = p.parse_args(argv)
    config = StorageConfig(file_bytes=parse_bytes(args.size, "--size"), block_bytes=parse_bytes(args.block, "--block"))
    rows: dict[str, list[dict[str, Any]]] = {"python": [], "fio": []}
    with tempfile.TemporaryDirectory(dir=args.directory, prefix="storage-bench-") as scratch:
        where = Path(scratch)
        for i in range(args.repeat):
            s = measure_stream(where / "python-stream.bin", config)
            rows["python"].append(
                {"engine": "python", "mode": s.mode, "write_mb_s": s.write_mb_s, "read_mb_s": s.read_mb_s}
            )
            direct = s.mode == DIRECT
            write = fio(where, config.file_bytes, config.block_bytes, direct, "write", args.timeout_s)
            read = fio(where, config.file_bytes, config.block_bytes, direct, "read", args.timeout_s)
            (where / "fio-stream.bin").unlink(missing_ok=True)
            rows["fio"].append({"engine": "fio", "direct": direct, "write_mb_s": write, "read_mb_s": read})
            for engine in ("python", "fio"):
                print(json.dumps({"repeat": i, **rows[engine][-1]}), flush=True)
    summary: dict[str, Any] = {"size": config.file_bytes, "block": config.block_bytes, "directory": str(args.directory)}
    for way in ("write_mb_s", "read_mb_s"):
        medians = {e: statistics.median(r[way] for r in rows[e]) for e in rows}
        summary[way] = {**medians, "python_over_fio": medians["python"] / medians["fio"]}
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())

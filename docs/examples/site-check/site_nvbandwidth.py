"""Node side of the example site check: run NVIDIA's nvbandwidth on the node, if it is installed,
and return its device-to-device bandwidth matrix. Runs on the node: imports nothing of the login
side (no pytest, no pytest_gpucluster session), returns a plain picklable dataclass."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass, field

TESTCASE = "device_to_device_memcpy_read_ce"


@dataclass(frozen=True)
class NodeBandwidth:
    node: str
    found: bool
    matrix: dict[str, float] = field(default_factory=dict)  # "gpuA->gpuB" → GB/s
    error: str = ""


def parse_matrix(text: str) -> dict[str, float]:
    """nvbandwidth's matrix (row = source GPU, column = destination; "N/A" on the diagonal)."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        cells = line.split()
        # A row: its GPU index, then one bandwidth with decimals (or N/A) per column; the header
        # row holds column indices only.
        if len(cells) < 2 or not cells[0].isdigit() or not all(_value(c) or c == "N/A" for c in cells[1:]):
            continue
        for column, cell in enumerate(cells[1:]):
            if _value(cell):
                out[f"gpu{cells[0]}->gpu{column}"] = float(cell)
    return out


def _value(cell: str) -> bool:
    whole, dot, part = cell.partition(".")
    return bool(dot) and whole.isdigit() and part.isdigit()


def run(ctx, binary: str = "nvbandwidth", timeout_s: float = 300.0) -> NodeBandwidth:
    """One task per node: the matrix of ``TESTCASE``, or why there is none."""
    path = shutil.which(binary)
    if path is None:
        return NodeBandwidth(ctx.hostname, found=False)
    try:
        proc = subprocess.run([path, "-t", TESTCASE], capture_output=True, text=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        return NodeBandwidth(ctx.hostname, found=True, error=f"{binary} did not finish within {timeout_s:.0f} s")
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
        return NodeBandwidth(ctx.hostname, found=True, error=f"{binary} exited {proc.returncode}: {tail[0]}")
    return NodeBandwidth(ctx.hostname, found=True, matrix=parse_matrix(proc.stdout))

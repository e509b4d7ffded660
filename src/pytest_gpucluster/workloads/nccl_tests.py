"""NVIDIA nccl-tests binaries as a workload: run ``<op>_perf`` on a node, parse what it prints.

Used when the profile names ``nccl.nccl_tests_dir`` (a build on the cluster's shared filesystem).
One task per node runs one process over all of the node's GPUs (``-g``), so this covers the
intra-node scope; an inter-node run needs nccl-tests built with MPI and launched by ``srun``
itself, which a submitit task cannot be.

Parsers cover both outputs of nccl-tests 2.x: the text table on stdout and the ``-J`` JSON file.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_gpucluster.workloads.busbw import SizeResult, SweepResult, merge_rows
from pytest_gpucluster.workloads.context import TaskContext
from pytest_gpucluster.workloads.nccl_log import nccl_debug_file, parse_nccl_log

BINARIES = {
    "all_reduce": "all_reduce_perf",
    "all_gather": "all_gather_perf",
    "reduce_scatter": "reduce_scatter_perf",
    "alltoall": "alltoall_perf",
    "broadcast": "broadcast_perf",
}
_OP_OF_BINARY = {v: k for k, v in BINARIES.items()}
_VERSION = re.compile(r"#\s*nccl-tests version\s+(\S+)(?:.*nccl-library=(\d+))?")
_CONFIG = re.compile(r"#\s*nThread\s+(\d+)\s+nGpus\s+(\d+).*?warmup iters:\s*(\d+)\s+iters:\s*(\d+)")
_DEVICE = re.compile(r"#\s+Rank\s+(\d+)\s+Group\s+\d+\s+Pid\s+\d+\s+on\s+(\S+)\s+device\s+(\d+)")
_OOB = re.compile(r"#\s*Out of bounds values\s*:\s*(\d+)")
_AVG = re.compile(r"#\s*Avg bus bandwidth\s*:\s*([0-9.eE+-]+|nan)")
_STARTING = re.compile(r"#\s*Collective test starting:\s*(\S+)")


def nccl_version_string(code: int) -> str:
    """NCCL_VERSION_CODE → "2.28.9" (codes ≥ 2.9 are major·10000 + minor·100 + patch)."""
    if code >= 10000:
        return f"{code // 10000}.{code // 100 % 100}.{code % 100}"
    return f"{code // 1000}.{code // 100 % 10}.{code % 100}"


@dataclass(frozen=True)
class NcclTestsRun:
    """What one nccl-tests run printed."""

    op: str | None
    rows: tuple[SizeResult, ...]
    n_ranks: int
    hosts: tuple[str, ...]
    warmup_iters: int
    iters: int
    version: str | None
    nccl_version: str | None
    out_of_bounds: int | None  # None: the footer is missing (the run died)
    avg_busbw: float | None
    errors: tuple[str, ...]  # lines that are neither comments nor rows (NCCL failures)

    def to_sweep(
        self, node: str, op: str, argv: Sequence[str] = (), env: Mapping[str, str] | None = None
    ) -> SweepResult:
        """As a SweepResult, so nccl-tests and torch results are judged the same way."""
        notes = [f"nccl-tests {self.version or '?'}: {' '.join(argv)}".rstrip(": ")]
        error = ""
        if self.out_of_bounds is None:
            error = "no footer: the run ended early" + (f" ({self.errors[-1]})" if self.errors else "")
        env = dict(env or {})
        return SweepResult(
            op=self.op or op,
            nodes=(node,),
            n_ranks=self.n_ranks,
            backend="nccl-tests",
            implementation=Path(argv[0]).name if argv else BINARIES.get(op, op),
            rows=self.rows,
            warmup_iters=self.warmup_iters,
            iters=self.iters,
            nccl_version=self.nccl_version,
            env=env,
            notes=tuple(notes),
            error=error,
            nccl_algo=env.get("NCCL_ALGO"),
            nccl_proto=env.get("NCCL_PROTO"),
        )


def _num(text: str) -> float:
    return float("nan") if text.lower() in ("n/a", "nan") else float(text)


def _half(size: int, count: int, fields: Sequence[str], in_place: bool) -> SizeResult:
    time_us, algbw, busbw, wrong = fields
    checked = wrong.upper() != "N/A"
    return SizeResult(
        size_bytes=size,
        count=count,
        in_place=in_place,
        time_us=_num(time_us),
        algbw=_num(algbw),
        busbw=_num(busbw),
        wrong=int(float(wrong)) if checked else -1,
    )


def parse_text(text: str) -> NcclTestsRun:
    """Parse the stdout of ``<op>_perf``: '#' header lines, rows
    ``size count type redop root time algbw busbw #wrong time algbw busbw #wrong`` (out-of-place
    first, then in-place; a row may hold in-place only), then the '#' footer."""
    rows: list[SizeResult] = []
    hosts: dict[int, str] = {}
    errors: list[str] = []
    op = version = nccl_version = None
    n_gpus = warmup = iters = 0
    oob: int | None = None
    avg: float | None = None
    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            continue
        if line.startswith("#"):
            if m := _VERSION.match(line):
                version = m.group(1)
                nccl_version = nccl_version_string(int(m.group(2))) if m.group(2) else None
            elif m := _STARTING.match(line):
                op = _OP_OF_BINARY.get(Path(m.group(1)).name)
            elif m := _CONFIG.match(line):
                n_gpus, warmup, iters = int(m.group(1)) * int(m.group(2)), int(m.group(3)), int(m.group(4))
            elif m := _DEVICE.match(line):
                hosts[int(m.group(1))] = m.group(2)
            elif m := _OOB.match(line):
                oob = int(m.group(1))
            elif m := _AVG.match(line):
                avg = _num(m.group(1))
            continue
        fields = line.split()
        if len(fields) in (9, 13) and fields[0].isdigit() and fields[1].isdigit():
            size, count = int(fields[0]), int(fields[1])
            try:
                if len(fields) == 13:
                    rows.append(_half(size, count, fields[5:9], in_place=False))
                    rows.append(_half(size, count, fields[9:13], in_place=True))
                else:
                    rows.append(_half(size, count, fields[5:9], in_place=True))
            except ValueError:
                errors.append(line)
            continue
        errors.append(line)
    n_ranks = len(hosts) or n_gpus
    return NcclTestsRun(
        op=op,
        rows=merge_rows(rows),
        n_ranks=n_ranks,
        hosts=tuple(hosts[k] for k in sorted(hosts)),
        warmup_iters=warmup,
        iters=iters,
        version=version,
        nccl_version=nccl_version,
        out_of_bounds=oob,
        avg_busbw=avg,
        errors=tuple(errors),
    )


def _json_half(size: int, count: int, half: Mapping[str, Any] | None, in_place: bool) -> SizeResult | None:
    if not half:
        return None
    wrong = half.get("nwrong")
    time_us = half.get("time", half.get("cpu_time"))
    return SizeResult(
        size_bytes=size,
        count=count,
        in_place=in_place,
        time_us=_num(str(time_us)),
        algbw=_num(str(half["alg_bw"])),
        busbw=_num(str(half["bus_bw"])),
        wrong=-1 if wrong is None else int(float(wrong)),
    )


def parse_json(text: str) -> NcclTestsRun:
    """Parse the file nccl-tests writes with ``-J out.json`` (2.17 and later)."""
    doc = json.loads(text)
    rows: list[SizeResult] = []
    for rec in doc.get("results", []):
        size, count = int(rec["size"]), int(rec["count"])
        for key, in_place in (("out_of_place", False), ("in_place", True)):
            row = _json_half(size, count, rec.get(key), in_place)
            if row is not None:
                rows.append(row)
    config = doc.get("config", {})
    devices = config.get("devices", [])
    argv = doc.get("args", [])
    code = doc.get("nccl_version")
    oob = doc.get("out_of_bounds")
    avg = doc.get("average_bus_bandwidth")
    return NcclTestsRun(
        op=_OP_OF_BINARY.get(Path(argv[0]).name) if argv else None,
        rows=merge_rows(rows),
        n_ranks=len(devices) or int(config.get("nthreads", 1)) * int(config.get("ngpus", 0)),
        hosts=tuple(d.get("hostname", "?") for d in devices),
        warmup_iters=int(config.get("warmup_iters", 0)),
        iters=int(config.get("iterations", 0)),
        version=None,
        nccl_version=nccl_version_string(int(code)) if isinstance(code, int) else None,
        out_of_bounds=int(oob["count"]) if isinstance(oob, dict) else None,
        avg_busbw=_num(str(avg["bandwidth"])) if isinstance(avg, dict) else None,
        errors=(),
    )


def nccl_tests_argv(
    binary: str, *, min_bytes: int, max_bytes: int, warmup_iters: int, iters: int, gpus: int
) -> list[str]:
    """The command line: the profile's sweep, doubling, results checked (``-c 1``), and the
    slowest rank's time (``-a 3``) as the torch path reports it."""
    return [
        binary,
        "-b",
        str(min_bytes),
        "-e",
        str(max_bytes),
        "-f",
        "2",
        "-g",
        str(gpus),
        "-w",
        str(warmup_iters),
        "-n",
        str(iters),
        "-c",
        "1",
        "-a",
        "3",
    ]


def run_nccl_tests(
    ctx: TaskContext,
    *,
    nccl_tests_dir: str,
    ops: Sequence[str],
    min_bytes: int,
    max_bytes: int,
    warmup_iters: int,
    iters: int,
    gpus: int,
    timeout_s: float = 600.0,
) -> list[SweepResult]:
    """Run each op's binary over this node's ``gpus`` GPUs; one SweepResult per op. A binary that
    is missing, times out or prints no rows gives a result with no rows and the reason in notes."""
    node = ctx.hostnames[ctx.node_rank] if ctx.node_rank < len(ctx.hostnames) else ctx.hostname
    env = {k: v for k, v in os.environ.items() if k.startswith("NCCL_")}
    out = []
    for op in ops:
        binary = str(Path(nccl_tests_dir) / BINARIES[op])
        argv = nccl_tests_argv(
            binary, min_bytes=min_bytes, max_bytes=max_bytes, warmup_iters=warmup_iters, iters=iters, gpus=gpus
        )
        # The binary's NCCL INFO lines go to a file of this op's own, read once it has ended.
        log_file = nccl_debug_file(os.environ, os.getpid(), ctx.hostname)
        child_env = None
        if log_file is not None:
            log_file = f"{log_file}.{op}"
            child_env = {**os.environ, "NCCL_DEBUG_FILE": log_file}
        try:
            proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, check=False, env=child_env)
            text = proc.stdout
            why = "" if proc.returncode == 0 else f"exit status {proc.returncode}: {proc.stderr[-500:]}"
        except FileNotFoundError:
            text, why = "", f"{binary} not found on {node}; check nccl.nccl_tests_dir"
        except subprocess.TimeoutExpired as exc:
            text, why = str(exc.stdout or ""), f"{binary} still running after {timeout_s:.0f} s; killed"
        sweep = parse_text(text).to_sweep(node, op, argv, env)
        if why:
            sweep = dataclasses.replace(sweep, error=why + (f"; {sweep.error}" if sweep.error else ""))
        if log_file is not None:
            try:
                log = parse_nccl_log(Path(log_file).read_text(encoding="utf-8", errors="replace"))
                sweep = dataclasses.replace(sweep, transports=log.transports, network=log.network)
            except OSError:
                pass  # the binary never started NCCL: its error says why
        out.append(sweep)
    return out

"""perftest's ``ib_write_bw`` between node pairs: on each node, the steps the login side planned
for it (``checks.ib_write_bw.plan_steps``), one after the other; within a step one process per
HCA, all at once, each on a TCP port of its own. ``checks.ib_write_bw`` parses and judges what
came back on the login node.

A step is a server (it waits for its peer's client) or a client (it writes to the peer's
server). The peer's server may start a moment later than the client, so a client that cannot
connect tries again until ``connect_wait_s`` has passed. Every process is bounded: a client by
``timeout_s`` per attempt, a server by ``connect_wait_s + timeout_s``, after which it is killed (its
client never came). Every run writes ``SIZE`` bytes per message in host memory (``--report_gbits``,
``-F`` so a CPU frequency governor does not end the run).
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from pytest_gpucluster.workloads.context import TaskContext
from pytest_gpucluster.workloads.inventory import node_name
from pytest_gpucluster.workloads.tools import find_tool

SIZE = 8 * 2**20  # bytes per message: large enough that the link, not the per-message cost, bounds it
RETRY_PAUSE_S = 1.0
# What perftest prints when no server listens yet at the peer's address and port.
_NO_SERVER = ("Couldn't connect to", "Unable to open file descriptor for socket connection")


@dataclass(frozen=True)
class Hca:
    """One active HCA port and the TCP port its ib_write_bw pair meets on."""

    device: str
    port: str
    tcp_port: int


@dataclass(frozen=True)
class Step:
    """What one node does in one step: serve or write to ``peer``, over every HCA in ``hcas``."""

    role: str  # "server" or "client"
    peer: str
    hcas: tuple[Hca, ...]


@dataclass(frozen=True)
class WriteResult:
    """One ib_write_bw process: its side, its HCA, its peer, and what it printed."""

    role: str
    node: str
    peer: str
    device: str
    port: str
    tcp_port: int
    argv: tuple[str, ...]
    returncode: int | None
    stdout: str
    stderr: str
    seconds: float
    timed_out: bool = False
    attempts: int = 1


@dataclass(frozen=True)
class NodeWrites:
    """Every ib_write_bw process one node ran (``found`` False: no binary; ``absent`` says where
    it was looked for)."""

    node: str
    found: bool
    absent: str = ""
    results: tuple[WriteResult, ...] = ()
    timeout_s: float = 0.0
    connect_wait_s: float = 0.0


def ib_write_bw_argv(exe: str, hca: Hca, *, server: str | None = None, size: int = SIZE) -> list[str]:
    """The command line of one side: the HCA and its port, the pair's TCP port, a fixed message
    size, Gb/s; the client names the server's host last."""
    argv = [exe, "-d", hca.device, "-i", hca.port, "-p", str(hca.tcp_port), "-s", str(size), "-F", "--report_gbits"]
    return [*argv, server] if server else argv


def _text(value: str | bytes | None) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else (value or "")


def _result(
    role: str,
    node: str,
    peer: str,
    hca: Hca,
    argv: Sequence[str],
    code: int | None,
    out: str,
    err: str,
    started: float,
    *,
    timed_out: bool = False,
    attempts: int = 1,
) -> WriteResult:
    return WriteResult(
        role=role,
        node=node,
        peer=peer,
        device=hca.device,
        port=hca.port,
        tcp_port=hca.tcp_port,
        argv=tuple(argv),
        returncode=code,
        stdout=out,
        stderr=err,
        seconds=time.monotonic() - started,
        timed_out=timed_out,
        attempts=attempts,
    )


def serve(node: str, peer: str, argv: Sequence[str], hca: Hca, *, limit_s: float) -> WriteResult:
    """One server: wait for the peer's client, at most ``limit_s``; killed after that."""
    started = time.monotonic()
    with subprocess.Popen(list(argv), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as proc:
        try:
            out, err = proc.communicate(timeout=limit_s)
            code: int | None = proc.returncode
            timed_out = False
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
            code, timed_out = None, True
    return _result("server", node, peer, hca, argv, code, out, err, started, timed_out=timed_out)


def send(
    node: str, peer: str, argv: Sequence[str], hca: Hca, *, timeout_s: float, connect_wait_s: float
) -> WriteResult:
    """One client: write to the peer's server; while no server listens there, try again until
    ``connect_wait_s`` has passed. Each attempt is bounded by ``timeout_s``."""
    started = time.monotonic()
    attempts = 0
    while True:
        attempts += 1
        try:
            done = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout_s, check=False)
        except subprocess.TimeoutExpired as exc:
            out, err = _text(exc.stdout), _text(exc.stderr)
            return _result("client", node, peer, hca, argv, None, out, err, started, timed_out=True, attempts=attempts)
        refused = done.returncode != 0 and any(s in done.stdout + done.stderr for s in _NO_SERVER)
        if not refused or time.monotonic() - started + RETRY_PAUSE_S > connect_wait_s:
            code, out, err = done.returncode, done.stdout, done.stderr
            return _result("client", node, peer, hca, argv, code, out, err, started, attempts=attempts)
        time.sleep(RETRY_PAUSE_S)


def run_step(
    node: str, exe: str, step: Step, *, timeout_s: float, connect_wait_s: float, size: int = SIZE
) -> list[WriteResult]:
    """Every HCA of one step at once; the step ends when each of its processes has."""
    with ThreadPoolExecutor(max_workers=max(1, len(step.hcas))) as pool:
        if step.role == "server":
            futures = [
                pool.submit(
                    serve, node, step.peer, ib_write_bw_argv(exe, h, size=size), h, limit_s=connect_wait_s + timeout_s
                )
                for h in step.hcas
            ]
        else:
            futures = [
                pool.submit(
                    send,
                    node,
                    step.peer,
                    ib_write_bw_argv(exe, h, server=step.peer, size=size),
                    h,
                    timeout_s=timeout_s,
                    connect_wait_s=connect_wait_s,
                )
                for h in step.hcas
            ]
        return [f.result() for f in futures]


def run_pairs(
    ctx: TaskContext,
    *,
    steps: Mapping[str, Sequence[Step]],
    path: str | None = None,
    timeout_s: float = 60.0,
    connect_wait_s: float = 60.0,
) -> NodeWrites | None:
    """Workload, one task per node: this node's steps in order."""
    if ctx.local_rank != 0:
        return None
    node = node_name(ctx)
    exe, absent = find_tool("ib_write_bw", path, "ib_write_bw_path")
    if exe is None:
        return NodeWrites(node, False, absent)
    results: list[WriteResult] = []
    for step in steps.get(node, ()):
        results += run_step(node, exe, step, timeout_s=timeout_s, connect_wait_s=connect_wait_s)
    return NodeWrites(node, True, "", tuple(results), timeout_s, connect_wait_s)

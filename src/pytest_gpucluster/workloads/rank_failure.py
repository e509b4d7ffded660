"""Rank-failure propagation (seed 001, "failure propagation when a rank exits"): when one rank of
a collective job dies, does the whole job end, and how fast?

Every rank writes time stamps to its own file in a folder the login node can read (the shared
filesystem on Slurm): joined, past the barrier, then the victim's exit, or a survivor's entering
the all_reduce, noticing the failure and being done. A heartbeat keeps being written until a rank
is done, so a survivor that the scheduler kills (``KillOnBadExit``/``--kill-on-bad-exit``) or
the NCCL watchdog aborts still leaves its last moment behind. The login node computes the
teardown time from these files alone (``teardown_from_stamps``), whatever killed whom.
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import os
import resource
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_gpucluster.workloads.context import TaskContext, process_start_time
from pytest_gpucluster.workloads.inventory import node_name

# Short on purpose: a survivor that relies on the collective's own timeout stops after this. The
# communicator is up (a barrier passed) before the victim dies, so only the doomed all_reduce waits.
PG_TIMEOUT_S = 10.0
HEARTBEAT_S = 0.25
EXIT_CODE = 17
VICTIM_DELAY_S = 1.0  # lets the survivors enter the all_reduce before the victim dies
NCCL_DUMP_WAIT_MS = 500


@dataclass(frozen=True)
class SurvivorReport:
    """What a survivor saw (returned when it was not killed first)."""

    rank: int
    node: str
    noticed: bool
    error: str


class _Stamps:
    """One rank's stamp file, rewritten atomically (readers never see half a file)."""

    def __init__(self, folder: Path, ctx: TaskContext) -> None:
        self.path = folder / f"rank{ctx.rank}.json"
        # "started": the workload's start, as the launcher stamps every other workload's (before
        # torch is imported); "process_started": when the task's process began.
        self.data: dict[str, Any] = {"rank": ctx.rank, "world_size": ctx.world_size, "node": node_name(ctx),
                                     "events": {}, "heartbeat": None, "started": time.time(),
                                     "process_started": process_start_time()}  # fmt: skip
        self._lock = threading.Lock()

    def event(self, name: str, **extra: Any) -> None:
        with self._lock:
            self.data["events"][name] = time.time()
            self.data.update(extra)
            self._write()

    def beat(self) -> None:
        with self._lock:
            self.data["heartbeat"] = time.time()
            self._write()

    def _write(self) -> None:
        tmp = self.path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(self.data), encoding="utf-8")
        os.replace(tmp, self.path)


def new_stamp_dir(root: Path) -> Path:
    """A fresh folder for one run's stamps under ``root`` (the run's job folder)."""
    folder = Path(root) / f"rank-failure-{uuid.uuid4().hex[:8]}"
    folder.mkdir(parents=True)
    return folder


def job_shape(available_nodes: int) -> tuple[int, int]:
    """(nodes, tasks per node): one task on each of two nodes, so the failure crosses the
    network; two tasks on one node where only one node is available."""
    return (2, 1) if available_nodes >= 2 else (1, 2)


@dataclass(frozen=True)
class Plan:
    """The rank-failure job: its shape, the GPUs it asks for per node and the ranks' backend."""

    nodes: int
    tasks_per_node: int
    gpus_per_node: int
    backend: str | None  # None: NCCL on GPUs where the job has them (``pick_backend``)
    note: str = ""  # why the ranks run on the CPU, for the measurement's detail


def plan(available_nodes: int, *, gpus_per_node: int, real_gpus: bool) -> Plan:
    """One rank per GPU where the node has a GPU for each rank; otherwise CPU ranks over gloo:
    NCCL refuses two ranks on one GPU ("Duplicate GPU detected"), and a job asking for more GPUs
    than a node has is refused by Slurm. GRES-only GPUs ask for none (the ranks are CPU ones)."""
    nodes, tasks = job_shape(available_nodes)
    if not real_gpus or gpus_per_node <= 0:
        return Plan(nodes, tasks, 0, None)
    if gpus_per_node >= tasks:
        return Plan(nodes, tasks, tasks, None)
    return Plan(nodes, tasks, 0, "gloo",
                f"{tasks} ranks on the CPU over gloo: the node has {gpus_per_node} GPU and NCCL refuses two "
                "ranks on one GPU")  # fmt: skip


def never_started(job_id: str, why: str, nodes: tuple[str, ...]) -> str:
    """The problem of a rank-failure job that ended before it ran: the fault was never injected."""
    where = ", ".join(nodes) if nodes else "any node of the partition"
    return (f"job {job_id} never started ({why}); it was to run on {where}, so no rank failed and no "
            "teardown was measured")  # fmt: skip


def job_minutes(bound_s: float) -> int:
    """A time limit that lets the slowest acceptable teardown finish, then stops a hung job."""
    return max(2, math.ceil((bound_s + PG_TIMEOUT_S + 60.0) / 60.0))


def rank_failure(
    ctx: TaskContext,
    *,
    stamp_dir: str,
    victim_rank: int | None = None,
    pg_timeout_s: float = PG_TIMEOUT_S,
    backend: str | None = None,
) -> SurvivorReport:
    """Workload: all ranks pass a barrier; the victim (the last rank, so rank 0's rendezvous store
    stays up) then exits with code 17 while the others wait in an all_reduce."""
    stamps = _Stamps(Path(stamp_dir), ctx)
    # A survivor may be ended by the NCCL watchdog's abort: that is the expected outcome here, and
    # a core file of a CUDA process (gigabytes, in the job's folder) would only slow the job's end.
    _soft, hard = resource.getrlimit(resource.RLIMIT_CORE)
    resource.setrlimit(resource.RLIMIT_CORE, (0, hard))

    import torch
    import torch.distributed as dist

    from pytest_gpucluster.workloads.distributed import device_for, pick_backend

    victim = ctx.world_size - 1 if victim_rank is None else victim_rank
    done = threading.Event()

    def heartbeat() -> None:
        while not done.wait(HEARTBEAT_S):
            stamps.beat()

    stamps.beat()
    threading.Thread(target=heartbeat, name="rank-failure-heartbeat", daemon=True).start()
    used = pick_backend(backend)
    # After a collective times out, torch's NCCL watchdog waits 4 x this (default 15 s: a minute)
    # for debug dumps before it ends the process; that minute says nothing about the cluster, so
    # it is cut short unless the profile's env sets it.
    os.environ.setdefault("TORCH_NCCL_WAIT_TIMEOUT_DUMP_MILSEC", str(NCCL_DUMP_WAIT_MS))
    device = device_for(ctx, used)
    kwargs: dict[str, Any] = {}
    if used == "nccl":
        torch.cuda.set_device(device)
        kwargs["device_id"] = device
    dist.init_process_group(used, init_method=f"tcp://{ctx.master_addr}:{ctx.master_port}", rank=ctx.rank,
                            world_size=ctx.world_size, timeout=_dt.timedelta(seconds=pg_timeout_s),
                            **kwargs)  # fmt: skip
    stamps.event("joined", backend=used, victim=victim)
    dist.barrier()
    stamps.event("after_barrier")
    if ctx.rank == victim:
        time.sleep(VICTIM_DELAY_S)
        stamps.event("victim_exit")
        os._exit(EXIT_CODE)  # no cleanup, no result: what a crashed or OOM-killed rank looks like
    stamps.event("entered_collective")
    error = ""
    try:
        t = torch.ones(1024, device=device)
        dist.all_reduce(t)
        if used == "nccl":
            torch.cuda.synchronize(device)
        stamps.event("collective_returned")  # impossible with a dead peer; reported as a problem
    except Exception as exc:
        error = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"[:300]
        stamps.event("noticed", error=error)
    # Tearing down a broken communicator can itself hang (NCCL); bound it and move on.
    closer = threading.Thread(target=_destroy_quietly, daemon=True)
    closer.start()
    closer.join(timeout=5.0)
    stamps.event("done")
    done.set()
    return SurvivorReport(ctx.rank, node_name(ctx), bool(error), error)


def _destroy_quietly() -> None:
    import torch.distributed as dist

    try:
        dist.destroy_process_group()
    except Exception:
        pass  # the group is broken by design here; its teardown error tells nothing new


# --------------------------------------------------------------------------- login-node side (pure)


@dataclass(frozen=True)
class Teardown:
    """How long the survivors took to stop after the victim exited, and how they stopped."""

    seconds: float
    where: str
    detail: str
    survivors: tuple[str, ...]  # one line per survivor
    problems: tuple[str, ...]  # the injection did not happen as planned
    # When the workload ran (epoch s): the first rank's start to the last stop seen. The job
    # returns no result by design, so this is where its run time comes from.
    ran_from: float = 0.0
    ran_to: float = 0.0
    process_from: float = 0.0  # the first rank's process start (epoch s; 0 when not known)


def teardown_from_stamps(folder: Path, heartbeat_s: float = HEARTBEAT_S) -> Teardown:
    """Read every rank's stamp file: teardown = the last survivor's stop − the victim's exit. A
    survivor killed before it could say "done" stopped within one heartbeat of its last one; the
    upper bound is used so a verdict never flatters the cluster."""
    ranks = []
    for path in sorted(Path(folder).glob("rank*.json")):
        try:
            ranks.append(json.loads(path.read_text(encoding="utf-8")))
        except (OSError, ValueError):
            continue  # a file being replaced right now; the other ranks still tell the story
    problems: list[str] = []
    victims = [r for r in ranks if "victim_exit" in r["events"]]
    if not victims:
        joined = ", ".join(f"rank {r['rank']} on {r['node']}: {', '.join(r['events']) or 'no event'}" for r in ranks)
        problems.append("no rank reached the point of failure (victim_exit); the job failed before the fault "
                        f"could be injected. Stamps: {joined or 'none written'}")  # fmt: skip
        return Teardown(float("nan"), "", "", (), tuple(problems))
    victim = victims[0]
    exit_t = victim["events"]["victim_exit"]
    lines: list[str] = []
    worst, worst_where = 0.0, ""
    for r in sorted(ranks, key=lambda r: r["rank"]):
        if r is victim:
            continue
        ev = r["events"]
        where = f"rank {r['rank']} on {r['node']}"
        if "collective_returned" in ev:
            problems.append(f"{where}: all_reduce completed although rank {victim['rank']} was dead")
        if "done" in ev:
            stop = ev["done"]
            how = f"noticed ({str(r.get('error') or 'no error text')[:120]})" if "noticed" in ev else "finished"
        elif r.get("heartbeat") is not None:
            stop = r["heartbeat"] + heartbeat_s
            how = ("ended without a Python exception (killed by the scheduler, or ended by the NCCL watchdog "
                   "after the collective timeout); stopped within one heartbeat of its last")
        else:
            problems.append(f"{where}: wrote no heartbeat")
            continue
        delay = max(0.0, stop - exit_t)
        lines.append(f"{where}: stopped {delay:.1f} s after the victim's exit, {how}")
        if delay >= worst:
            worst, worst_where = delay, r["node"]
    world = max(int(r.get("world_size", 0)) for r in ranks)
    if len(ranks) < world:
        problems.append(f"only {len(ranks)} of {world} ranks wrote stamps to {folder}")
    if not lines:
        problems.append("no survivor left a stop time")
    backend = f" ({victim['backend']} ranks)" if victim.get("backend") else ""
    detail = f"rank {victim['rank']} on {victim['node']} exited with {EXIT_CODE}{backend}; " + "; ".join(lines)
    starts = [float(r["started"]) for r in ranks if r.get("started")]
    stops = [exit_t, *(max([*r["events"].values(), (r.get("heartbeat") or 0.0) + heartbeat_s]) for r in ranks)]
    processes = [float(r["process_started"]) for r in ranks if r.get("process_started")]
    return Teardown(round(worst, 2), worst_where, detail, tuple(lines), tuple(problems),
                    min(starts) if starts else 0.0, max(stops), min(processes) if processes else 0.0)  # fmt: skip

"""Rank-failure propagation: when one rank of a collective job dies, does the whole job end, and
how fast?

Every rank writes time stamps to its own file in a folder the login node can read (the shared
filesystem on Slurm): joined, past the barrier, then the victim's exit, or a survivor's entering
the all_reduce, noticing the failure and being done. A heartbeat keeps being written until a rank
is done, so a survivor that the scheduler kills (``KillOnBadExit``/``--kill-on-bad-exit``) or
the NCCL watchdog aborts still leaves its last moment behind. The login node computes the
teardown time from these files alone (``checks.rank_failure.teardown_from_stamps``), whatever
killed whom; ``new_stamp_dir`` makes their folder there before the job.
"""

from __future__ import annotations

import datetime as _dt
import json
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
        self.data: dict[str, Any] = {
            "rank": ctx.rank,
            "world_size": ctx.world_size,
            "node": node_name(ctx),
            "events": {},
            "heartbeat": None,
            "started": time.time(),
            "process_started": process_start_time(),
        }
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
    from pytest_gpucluster.workloads.net_settings import check_settings

    victim = ctx.world_size - 1 if victim_rank is None else victim_rank
    done = threading.Event()

    def heartbeat() -> None:
        while not done.wait(HEARTBEAT_S):
            stamps.beat()

    stamps.beat()
    threading.Thread(target=heartbeat, name="rank-failure-heartbeat", daemon=True).start()
    used = pick_backend(backend)
    check_settings(used)  # a setting that matches nothing here is the run's configuration's fault
    # After a collective times out, torch's NCCL watchdog waits 4 x this (default 15 s: a minute)
    # for debug dumps before it ends the process; that minute says nothing about the cluster, so
    # it is cut short unless the profile's env sets it.
    os.environ.setdefault("TORCH_NCCL_WAIT_TIMEOUT_DUMP_MILSEC", str(NCCL_DUMP_WAIT_MS))
    device = device_for(ctx, used)
    kwargs: dict[str, Any] = {}
    if used == "nccl":
        torch.cuda.set_device(device)
        kwargs["device_id"] = device
    dist.init_process_group(
        used,
        init_method=f"tcp://{ctx.master_addr}:{ctx.master_port}",
        rank=ctx.rank,
        world_size=ctx.world_size,
        timeout=_dt.timedelta(seconds=pg_timeout_s),
        **kwargs,
    )
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

"""Jobs that must run at the same time (the GPU-isolation pair): submitted together, waited on
together, and given back to the queue when a job that came after them holds what they need.

Each member of such a group waits inside its job for the others, holding its GPUs. Slurm starts
jobs one by one, so a job submitted between two members can keep the second from starting while
the first holds its half: another xdist worker's or another run's pair (each would hold half of
every node and wait for the other until ``queue_timeout_s``), or a job queued ahead of the second
member that needs what the first holds (another worker's node probe). Here, while some members run
and others wait longer than ``grace_s``, the jobs on and queued for the waiting members' nodes are
looked at (``faults.gives_way``): when one of them came between, the group cancels its jobs and
submits them again, now behind it. The members' job names carry the group's mark, so of two groups
holding part of each other's nodes exactly one (the younger) gives way. A job that ran before the
group began is waited for, bounded by the members' own ``queue_timeout_s``, then named as other
work.

Why not one allocation or a heterogeneous job: two steps of one allocation are not two jobs, and
the check is that two jobs get disjoint GPUs; Slurm starts heterogeneous jobs only in its backfill
pass (``bf_interval``, 30 s by default), on every run, and never under sched/builtin.
"""

from __future__ import annotations

import concurrent.futures
import time
from collections.abc import Callable, Sequence
from typing import Any

from pytest_gpucluster import slurm
from pytest_gpucluster.errors import GpuClusterError
from pytest_gpucluster.launch import Job, TaskResult
from pytest_gpucluster.launch.faults import gives_way
from pytest_gpucluster.launch.watcher import SlurmWatcher

# How long some members may run while others wait before the holders are looked at: a member
# normally starts within a scheduling pass of the first (batch_sched_delay, 3 s by default).
GRACE_S = 5.0
POLL_S = 1.0
# At most this many tries: each give-way puts the group behind a job that came later.
MAX_TRIES = 4
_RUNNING = {"RUNNING", "COMPLETING", "CONFIGURING"}


def results_together(*jobs: Job[Any]) -> list[list[TaskResult[Any]]]:
    """The results of jobs that run at once and wait for each other: waited on together, so
    that one failing (stuck in the queue past queue_timeout_s, say) cancels the others at
    once instead of leaving them to wait out their own bound for a partner that never comes."""
    with concurrent.futures.ThreadPoolExecutor(max_workers=len(jobs), thread_name_prefix="together") as pool:
        futures = [pool.submit(job.results) for job in jobs]
        done, _ = concurrent.futures.wait(futures, return_when=concurrent.futures.FIRST_EXCEPTION)
        first = next((f.exception() for f in futures if f in done and f.exception() is not None), None)
        if first is not None:
            for job in jobs:
                job.cancel()
            concurrent.futures.wait(futures)  # the others end now, cancelled: their errors say less
            raise first
        return [f.result() for f in futures]


def run_together(
    submit: Callable[[], Sequence[Job[Any]]],
    *,
    say: Callable[[str], None],
    grace_s: float = GRACE_S,
    poll_s: float = POLL_S,
    max_tries: int = MAX_TRIES,
    watcher: SlurmWatcher | None = None,
) -> list[list[TaskResult[Any]]]:
    """Submit the group (``submit`` submits every member afresh, each try) and return each
    member's results; a group that gives way is cancelled and submitted again, at most
    ``max_tries`` times in all. The members' states and what holds their nodes are read through
    ``watcher``: the launcher's, shared with every job it waits on, where the caller has one."""
    watcher = watcher or SlurmWatcher()
    for attempt in range(1, max_tries + 1):
        jobs = list(submit())
        with concurrent.futures.ThreadPoolExecutor(max_workers=len(jobs), thread_name_prefix="together") as pool:
            futures = [pool.submit(job.results) for job in jobs]
            holder = None if attempt == max_tries else _watch(jobs, futures, grace_s, poll_s, watcher)
            if holder is None:
                done, _ = concurrent.futures.wait(futures, return_when=concurrent.futures.FIRST_EXCEPTION)
                first = next((f.exception() for f in futures if f in done and f.exception() is not None), None)
                if first is None:
                    return [f.result() for f in futures]
                for job in jobs:
                    job.cancel()
                concurrent.futures.wait(futures)
                raise first
            for job in jobs:
                job.cancel()
            concurrent.futures.wait(futures)  # each ends at once, cancelled
        ids = ", ".join(j.job_id for j in jobs)
        say(f"jobs {ids}, which must run at once, gave way to {holder.describe()}; submitted again behind it")
    raise AssertionError("unreachable: the last try is waited on to its end")


def _watch(
    jobs: Sequence[Job[Any]],
    futures: Sequence[concurrent.futures.Future[Any]],
    grace_s: float,
    poll_s: float,
    watcher: SlurmWatcher,
) -> slurm.Holder | None:
    """Until every member has started (or one ended): the job this group must give way to, if
    one appears while the group is split for longer than ``grace_s``; None otherwise."""
    ids = [j.job_id for j in jobs]
    split_since: float | None = None
    while not any(f.done() for f in futures):
        try:
            now_states = watcher.entries(ids)
        except GpuClusterError:  # the queue cannot say now; each member's own wait still bounds it
            now_states = {}
        running = [i for i in ids if now_states.get(i, ("", ""))[0] in _RUNNING]
        waiting = [j for j in jobs if now_states.get(j.job_id, ("", ""))[0] == "PENDING"]
        if running and len(running) == len(ids):
            return None  # all started: they meet at their hold
        if running and waiting:
            now = time.monotonic()
            split_since = split_since or now
            if now - split_since >= grace_s:
                nodes = tuple(dict.fromkeys(n for j in waiting for n in j.nodelist))
                waiting_ids = [j.job_id for j in waiting]
                try:
                    holder = gives_way(ids, waiting_ids, watcher.holders(nodes), watcher.queued_for(nodes))
                except GpuClusterError:
                    holder = None
                if holder is not None:
                    return holder
        else:
            split_since = None
        time.sleep(poll_s)
    return None

"""One watcher for all the jobs of a launcher, as submitit shares one ``InfoWatcher`` across its
jobs. ``JobWatcher`` keeps the jobs waited on and the run's lost nodes (all the local executor
needs); ``SlurmWatcher`` adds what Slurm says, through which every waiter reads it, asking Slurm as
few times as the waiters allow.

A ``SlurmWatcher`` owns
* the queue state: job → (state, reason), from one squeue for every job waited on, read at most
  every ``QUEUE_READ_S`` however many jobs wait (64 per-node training jobs at 64 nodes), and
  accounting's word through a sacct watcher of submitit's kind that is this watcher's own: the
  one submitit shares across every job of the process keeps a job's final state under its id
  for good, and a controller started on fresh state gives that id to a new job;
* the node state: what Slurm says of the nodes under and around the jobs waited on, from one node
  listing of those nodes (not of the whole cluster) shared by every waiter for ``NODE_READ_S``,
  and the jobs that run or wait on those nodes;
* the run's lost nodes (``launch.lost.LostNodes``, the run's one record, handed to it): learned
  once, with the first evidence, and read by every job after.

The launcher submits and cancels; jobs (``launch.job``) wait through this and the rules of
``launch.wait_rules``; the co-scheduled pair (``launch.together``) reads its members' states and
what holds their nodes here. Every Slurm command goes through ``slurm`` (and so through the
bounded retry of ``slurm_retry``), on the run's one client (``slurm.Slurm``).
"""

from __future__ import annotations

import contextlib
import logging
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from typing import Any

import submitit
from submitit.slurm.slurm import SlurmInfoWatcher

from pytest_gpucluster import slurm
from pytest_gpucluster.errors import GpuClusterError
from pytest_gpucluster.launch import Job
from pytest_gpucluster.launch import wait_rules as rules
from pytest_gpucluster.launch.lost import LostNodes
from pytest_gpucluster.slurm import Holder, NodeInfo, Slurm

# How old the shared squeue read (job states and reasons) and node listing may be when read.
QUEUE_READ_S = rules.QUICK_STATE_S
NODE_READ_S = 1.0
# At a run's normal end: how long jobs whose results were all read may take to leave the queue by
# themselves (their tasks end once their result is written) before they are cancelled.
SETTLE_S = 10.0
SETTLE_POLL_S = 0.1


class JobWatcher:
    """The jobs a launcher waits on and the run's record of lost nodes, shared by every job of
    the launcher. It asks no one: submitit's local executor's jobs are processes of this machine,
    and what Slurm says of a Slurm launcher's jobs is ``SlurmWatcher``'s. Thread-safe: jobs are
    waited on from several threads."""

    def __init__(self, *, lost: LostNodes | None = None) -> None:
        # submitit's submission and its state queries are not thread-safe: jobs started ahead (see
        # run/runner.py) are submitted and waited for from several threads.
        self.submitit_lock = threading.RLock()
        self._lock = threading.Lock()
        self._watched: dict[str, Job[Any]] = {}  # job id → the job, submitted and not yet seen to end
        self._ending: set[str] = set()  # results all read, the job not yet seen to leave the queue
        self._nodes_used: set[str] = set()  # every node a job of this run was pinned to
        # The nodes the run lost under its jobs: the run's one record (a new one when none is given).
        self.lost = LostNodes() if lost is None else lost

    # ------------------------------------------------------------------ the jobs waited on

    def watch(self, job: Job[Any], nodelist: Sequence[str] = ()) -> None:
        """Follow ``job`` until it ends or is cancelled; ``nodelist``: the nodes it is pinned to."""
        with self._lock:
            self._watched[job.job_id] = job
            self._nodes_used.update(nodelist)

    def unwatch(self, job_id: str) -> None:
        """The job ended or was cancelled: no more queue reads for it."""
        with self._lock:
            self._watched.pop(job_id, None)

    def watched(self) -> list[Job[Any]]:
        """The jobs submitted and not yet seen to end."""
        with self._lock:
            return list(self._watched.values())

    def note_ending(self, job_id: str) -> None:
        """All results of the job were read while a queue still lists it: ``settle`` waits for it."""
        with self._lock:
            self._ending.add(job_id)

    def settle(self, limit_s: float = SETTLE_S) -> list[str]:
        """The jobs of ``note_ending`` that are still listed at the run's end. A job of this
        machine ends with its processes: none waits."""
        with self._lock:
            self._ending.clear()
        return []


class SlurmWatcher(JobWatcher):
    """What Slurm says of a launcher's jobs and their nodes, read once for all of them."""

    def __init__(
        self,
        *,
        accounting: bool = True,
        reserved: frozenset[str] = frozenset(),
        lost: LostNodes | None = None,
        client: Slurm | None = None,
    ) -> None:
        super().__init__(lost=lost)
        # The run's client of Slurm: every question goes through it, and with it the run's record
        # of the daemons' outages (a new one when none is given).
        self.client = Slurm() if client is None else client
        # False: the cluster runs without slurmdbd; jobs are followed through the queue, and
        # submitit's warnings that sacct failed say nothing (``sacct_quiet``).
        self.accounting = accounting
        # The nodes of the run's reservation: there a MAINTENANCE node takes the run's jobs.
        self.reserved = reserved
        # Accounting's word on this launcher's jobs only (``job_state``): one sacct for all of
        # them, as submitit asks, with no final state of another launcher's job under a reused id.
        self.sacct = SlurmInfoWatcher(delay_s=600)
        self._queue_lock = threading.Lock()
        self._queue_read: dict[str, tuple[str, str]] = {}
        self._queue_read_ids: frozenset[str] = frozenset()
        self._queue_read_at = float("-inf")
        self._queue_said: dict[str, str] = {}  # job id → its state in the queue, "GONE" once it left
        self._nodes_lock = threading.Lock()
        self._nodes_read: list[NodeInfo] = []
        self._nodes_read_names: frozenset[str] = frozenset()
        self._nodes_read_at = float("-inf")
        self._job_nodes: dict[str, tuple[str, ...]] = {}

    def settle(self, limit_s: float = SETTLE_S) -> list[str]:
        """Wait (bounded) for the jobs of ``note_ending`` to leave the queue by themselves;
        returns the ids still listed at the limit."""
        with self._lock:
            ending, self._ending = sorted(self._ending), set()
        deadline = time.monotonic() + limit_s
        while ending:
            try:
                listed = slurm.my_queue(self.client)  # one question per look, however many jobs
            except GpuClusterError:
                break  # the queue cannot say: the caller's cancel covers them
            ending = [job_id for job_id in ending if job_id in listed]
            if not ending or time.monotonic() >= deadline:
                break
            time.sleep(SETTLE_POLL_S)
        return ending

    # ------------------------------------------------------------------ job states

    def sacct_quiet(self) -> contextlib.AbstractContextManager[None]:
        """Around submitit's state queries: on a cluster without accounting, its warning that sacct
        failed is dropped (the queue is read instead); with accounting it is kept."""
        return contextlib.nullcontext() if self.accounting else sacct_bypass_quiet()

    def job_state(self, job: submitit.Job[Any], force: bool) -> str:
        """The job's state: accounting's (this watcher's ``sacct``; ``force``: asked now, else its
        last answer), else the queue's. A job the queue no longer knows has ended ("GONE"), so no
        wait outlives it."""
        job_id = str(job.job_id)
        with self.submitit_lock, self.sacct_quiet():
            state = str(self.sacct.get_state(job_id, mode="force" if force else "cache")).upper()
        if state != "UNKNOWN":
            return state
        if force:  # no accounting (sacct fails) or not recorded yet: ask the queue
            try:
                queued = self.queue_state(job_id)
            except Exception:
                return state
            self._queue_said[job_id] = queued or "GONE"
        return self._queue_said.get(job_id) or state

    def sacct_done(self, job: submitit.Job[Any]) -> bool:
        """Accounting's last word: the job is done."""
        with self.submitit_lock:
            return bool(self.sacct.is_done(str(job.job_id), mode="cache"))

    def last_queue_state(self, job_id: str) -> str:
        """The job's state as the queue last said it ("GONE": it left), "" when not asked."""
        return self._queue_said.get(job_id, "")

    def entries(self, job_ids: Sequence[str] = ()) -> dict[str, tuple[str, str]]:
        """The queue's word on ``job_ids`` (all jobs watched when empty), job id → (state,
        reason): one squeue for every job watched, shared by every caller for ``QUEUE_READ_S``.
        A job missing from the answer has left the queue."""
        with self._queue_lock:
            now = time.monotonic()
            if now - self._queue_read_at >= QUEUE_READ_S or not self._queue_read_ids.issuperset(job_ids):
                with self._lock:
                    ids = frozenset(self._watched) | frozenset(job_ids)
                self._queue_read = slurm.queue_entries(self.client, ids)
                self._queue_read_ids = ids
                self._queue_read_at = time.monotonic()
            read = self._queue_read
        return {i: read[i] for i in job_ids if i in read} if job_ids else dict(read)

    def queue_state(self, job_id: str) -> str | None:
        """The job's state as the queue sees it (works without accounting), None once Slurm no
        longer knows it; a job the shared read no longer lists is asked after on its own."""
        entry = self.entries().get(job_id)
        return entry[0] if entry else slurm.queue_state(self.client, job_id)

    def pending_reason(self, job_id: str) -> str:
        """Slurm's reason the job waits, from the shared read; "" when it cannot say."""
        try:
            reason = self.entries().get(job_id, ("", ""))[1]
        except Exception:  # a reason is a nicety; never let it mask the real error
            return ""
        return rules.pending_reason(reason)

    def controller_state(self, job_id: str) -> str | None:
        """The job's state as slurmctld has it (squeue, else scontrol); None when unknown."""
        try:
            return slurm.queue_state(self.client, job_id)
        except Exception:
            return None

    def controller_job(self, job_id: str) -> dict[str, str]:
        """What slurmctld holds about the job (``slurm.controller_job``); empty when it cannot say."""
        try:
            return slurm.controller_job(self.client, job_id) or {}
        except Exception:  # the controller cannot say; what the waiters saw still does
            return {}

    def nudge(self, job_id: str) -> None:
        """Have Slurm look at a waiting job at once (``slurm.nudge_scheduler``)."""
        try:
            slurm.nudge_scheduler(self.client, job_id)
        except Exception:  # a nudge only saves time; the queue bound still holds
            pass

    # ------------------------------------------------------------------ node states

    def nodes(self, names: Sequence[str], max_age_s: float = NODE_READ_S) -> list[NodeInfo]:
        """``names`` as Slurm knows them, from a listing at most ``max_age_s`` old (0: now). One
        listing serves every waiter: it covers every node a job of this run was pinned to and the
        names asked, and is read again when older or missing one; GpuClusterError or OSError when
        Slurm cannot be asked."""
        with self._nodes_lock:
            now = time.monotonic()
            if now - self._nodes_read_at > max_age_s or not self._nodes_read_names.issuperset(names):
                with self._lock:
                    wanted = frozenset(self._nodes_used) | frozenset(names)
                self._nodes_read = slurm.nodes(self.client, sorted(wanted))
                self._nodes_read_names = wanted
                self._nodes_read_at = time.monotonic()
            wanted_now = set(names)
            return [n for n in self._nodes_read if n.name in wanted_now]

    def unusable(self, nodes: Sequence[str]) -> dict[str, str]:
        """Of ``nodes``, those Slurm will not start a job on: name → state and reason. Empty
        when Slurm cannot be asked (queue_timeout_s still bounds the wait)."""
        try:
            return rules.unusable(self.nodes(nodes), nodes, reserved=self.reserved)
        except Exception:
            return {}

    def lost_among(self, nodes: Sequence[str], max_age_s: float = NODE_READ_S) -> dict[str, str]:
        """Of ``nodes``, those down, failing or not responding: name → state and reason. Empty
        when Slurm cannot be asked (the job's own state and time limit still bound the wait)."""
        if not nodes:
            return {}
        try:
            return slurm.lost_nodes(self.nodes(nodes, max_age_s), tuple(nodes))
        except Exception:
            return {}

    def job_nodes(self, job_id: str, expected: int | None = None) -> tuple[str, ...]:
        """The nodes the job runs or ran on; empty when Slurm cannot say yet. A full allocation
        (``expected`` nodes) is kept: Slurm is not asked again."""
        known = self._job_nodes.get(job_id)
        if known is not None:
            return known
        try:
            nodes = slurm.job_nodes(self.client, job_id, expected)
        except Exception:
            return ()
        # Neither may list the whole allocation yet while the job starts: keep only a full one.
        if nodes and (expected is None or len(nodes) == expected):
            self._job_nodes[job_id] = nodes
        return nodes

    def holders(self, nodes: Sequence[str], *, besides: str = "") -> list[Holder]:
        """The jobs that run or end on ``nodes`` (any user's), but ``besides``; GpuClusterError
        when Slurm cannot say."""
        return [h for h in slurm.holders(self.client, tuple(nodes)) if h.job_id != besides]

    def queued_for(self, nodes: Sequence[str]) -> list[Holder]:
        """The pending jobs (any user's) that asked for any of ``nodes`` by name."""
        return slurm.queued_for(self.client, tuple(nodes))

    def what_holds(self, nodes: Sequence[str], holders: Sequence[Holder]) -> str:
        """Why a job pinned to ``nodes`` may still wait, as one clause (``rules.held_clause``):
        ``holders`` on those nodes, and the nodes this run used that Slurm cannot use or lost."""
        used = sorted(self._nodes_used | {n for h in holders for n in h.nodes})
        return rules.held_clause(nodes, holders, {**self.unusable(used), **self.lost.nodes})

    def ending_on_lost(self, nodes: Sequence[str], job_id: str) -> str:
        """The jobs Slurm is still ending on a node this run lost that hold ``nodes``, when only
        such jobs hold them (``rules.ending_on_lost``); else empty."""
        lost = self.lost.nodes
        if not lost:
            return ""
        try:
            holders = self.holders(nodes, besides=job_id)
        except Exception:  # cannot tell: the wait counts as any other
            return ""
        return rules.ending_on_lost(holders, lost)


def submitit_logs_to_stderr() -> None:
    """submitit logs to stdout (e.g. a warning each time sacct fails on a cluster without
    accounting); a script whose stdout is JSON lines moves those logs to stderr."""
    for handler in logging.getLogger("submitit").handlers:
        if isinstance(handler, logging.StreamHandler) and handler.stream is sys.stdout:
            handler.setStream(sys.stderr)


# submitit's warning each time sacct fails ("Call #12 - Bypassing sacct error ..."): on a cluster
# without accounting it comes with every state query, up to hundreds per test.
_SACCT_BYPASSED = "Bypassing sacct error"


class SacctBypassedFilter(logging.Filter):
    """Drops submitit's warning that sacct failed and is bypassed; every other record passes."""

    def filter(self, record: logging.LogRecord) -> bool:
        return _SACCT_BYPASSED not in record.getMessage()


@contextlib.contextmanager
def sacct_bypass_quiet() -> Iterator[None]:
    """While the block runs, submitit's logger drops its sacct-bypassed warnings."""
    logger = logging.getLogger("submitit")
    quiet = SacctBypassedFilter()
    logger.addFilter(quiet)
    try:
        yield
    finally:
        logger.removeFilter(quiet)

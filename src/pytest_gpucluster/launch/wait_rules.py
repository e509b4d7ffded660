"""The rules of a bounded job wait, as pure functions: Slurm's states, reasons, node states and
the wait's clock in, a decision out. A rule that ends the wait returns a ``GiveUp`` (the error to
raise and its message); the job (``launch.job``) cancels, adds its id, nodes and logs, and raises.

A job may stay PENDING for ``queue_timeout_s`` and RUN for its time limit plus ``GRACE_S``. It is
given up at once when Slurm holds it for a reason no wait cures (``never_starts``), when a node it
is pinned to cannot take it (``pinned_unusable``), when a node under it goes down or stops
answering while it runs (``lost_while_running``), when Slurm puts it back in the queue after it
started (``requeued``), or when one task failed and the others still run well after
(``task_failed_long_ago``: a hung rank).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from pytest_gpucluster.errors import (
    LaunchError,
    NodeLostError,
    QueueAfterOutageError,
    QueueHeldError,
    QueueTimeoutError,
    WallTimeoutError,
)
from pytest_gpucluster.slurm import Holder, NodeInfo, nodes_where

# States in which a job has not started to run yet.
WAITING = frozenset({"PENDING", "REQUEUED", "UNKNOWN", "CONFIGURING", "READY"})
# Slurm's final job states (as squeue/scontrol say them; "CANCELLED by 0" included).
ENDED = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE")
# Back in the queue after it ran: Slurm requeued it (after a node failure, by default).
REQUEUED = frozenset({"PENDING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED"})
# How long after slurmctld comes back a waiting job still waits for it: a job of this run that
# ended while it was away stays COMPLETING until its node registers again, within SlurmdTimeout
# (300 s by default).
AFTER_OUTAGE_S = 300.0
# Pending reasons no wait can cure: only a change to Slurm's configuration, the partition or the
# account would (squeue(1), "JOB REASON CODES"). A job held on one is cancelled once the reason
# has stood ``NEVER_CONFIRM_S``, not after queue_timeout_s.
NEVER_STARTS = {
    "PartitionConfig": "the partition cannot hold the job as asked",
    "PartitionTimeLimit": "the job's time limit is above the partition's",
    "BadConstraints": "no node satisfies the job's constraints",
    "InvalidAccount": "the account is not valid",
    "InvalidQOS": "the QOS is not valid",
    "DependencyNeverSatisfied": "its dependency can never be satisfied",
}
NEVER_CONFIRM_S = 2.0
# Past the job's own time limit, Slurm needs a moment to kill it and submitit to notice.
GRACE_S = 90.0
# How often the job's state is asked for: every QUICK_STATE_S for its first QUICK_LOOK_S (a short
# job that ends without results is then seen gone within half a second), every ENDING_CHECK_S once
# some tasks have their results (it is about to end, or a task failed), else every SACCT_EVERY_S.
SACCT_EVERY_S = 3.0
QUICK_STATE_S = 0.5
QUICK_LOOK_S = 30.0
ENDING_CHECK_S = 0.5
# How often the nodes under a job are checked, and how long one may stay NOT_RESPONDING (a busy
# slurmd misses a ping now and then) before the job is given up; DOWN ends it at once. A job
# waiting behind a lost node's ending job is looked at every BEHIND_LOST_CHECK_S, to start soon.
NODE_CHECK_S = 5.0
BEHIND_LOST_CHECK_S = 1.0
NOT_RESPONDING_GRACE_S = 10.0
# How often slurmctld is asked whether a job that looks back in the queue really is.
REQUEUE_CHECK_S = 1.0
# After one task failed, how long the others may go on (they may be failing too, just slower)
# before the job is cancelled: a rank that hangs outside a collective would hold it to its limit.
FAILED_TASK_GRACE_S = 20.0
# How often the result files of all tasks are read for a failed task while the job runs.
FAILED_SCAN_S = 1.0
# How long results may lag behind the end of the job on a shared filesystem, and behind one that
# was cancelled or killed (no task of it writes one now).
RESULT_LAG_S = 10.0
RESULT_LAG_FAILED_S = 3.0


@dataclass(frozen=True)
class GiveUp:
    """A rule's decision to end the wait: the job is cancelled and ``error`` raised with
    ``message`` (after the job's id, name and nodes). ``lost``: the nodes it names as lost, which
    the run learns; ``fault_sentence``: the sentence of a fault outside the nodes."""

    error: type[LaunchError]
    message: str
    lost: Mapping[str, str] = field(default_factory=dict)
    fault_sentence: str = ""


def has_ended(state: str) -> bool:
    """Slurm says the job ended, or the queue no longer knows it ("GONE")."""
    return state == "GONE" or state.startswith(ENDED)


def is_waiting(state: str) -> bool:
    """The job has not started to run yet."""
    return state in WAITING


def has_run(state: str) -> bool:
    """The job is in a state past the queue: it started."""
    return not is_waiting(state) and not has_ended(state)


def state_every(since_submit_s: float, some_results: bool) -> float:
    """Seconds between two fresh reads of the job's state."""
    if some_results:
        return ENDING_CHECK_S
    return QUICK_STATE_S if since_submit_s < QUICK_LOOK_S else SACCT_EVERY_S


def state_words(why: str) -> set[str]:
    """The state words of ``"DOWN+NOT_RESPONDING (reason)"``, without the reason."""
    return set(why.split(" (")[0].split("+"))


def pending_reason(reason: str) -> str:
    """Slurm's pending reason, or "" while the scheduler has not evaluated the job yet."""
    return "" if reason in ("None", "(null)") else reason


# --------------------------------------------------------------------------- in the queue


def never_starts_since(reason: str, since: float | None, now: float) -> float | None:
    """When a reason no wait cures was first read (``since`` kept while it stands), None while
    the reason is one that waiting may cure."""
    if reason not in NEVER_STARTS:
        return None
    return since if since is not None else now


def never_starts_confirmed(since: float | None, now: float) -> bool:
    """The reason no wait cures has stood long enough to be Slurm's settled word."""
    return since is not None and now - since >= NEVER_CONFIRM_S


def needs_shape_hint(reason: str) -> bool:
    """The reason says the job's shape is beyond the partition: the error names the nodes that
    offer too little."""
    return reason in ("PartitionConfig", "BadConstraints")


def never_starts(state: str, reason: str, queue_limit_s: float, timeout_min: int, shape_hint: str) -> GiveUp:
    """The error for a job Slurm holds for a reason no wait cures; ``shape_hint`` is the
    launcher's account of the partition's nodes (for ``needs_shape_hint`` reasons)."""
    hint = ""
    if needs_shape_hint(reason):
        hint = shape_hint
    elif reason == "PartitionTimeLimit":
        hint = f"; the job asked for {timeout_min} min"
    return GiveUp(
        LaunchError,
        f"Slurm will not start it: {state}, reason {reason} ({NEVER_STARTS[reason]}){hint}; cancelled "
        f"at once rather than waiting queue_timeout_s ({queue_limit_s:.0f} s). Check the profile against "
        "the partition (sinfo, scontrol show partition).",
    )


def unusable(found: Iterable[NodeInfo], nodes: Sequence[str], *, reserved: Collection[str] = ()) -> dict[str, str]:
    """Of ``nodes``, those Slurm will not start a job on (down, not responding, drained,
    unknown), from its list of nodes ``found``: name → state and reason. A node of the run's
    reservation (``reserved``) in MAINTENANCE takes the run's jobs."""
    return nodes_where(found, nodes, lambda n: not n.usable_in(reservation=n.name in reserved))


def pinned_unusable(state: str, reason: str, unusable_nodes: Mapping[str, str]) -> GiveUp | None:
    """A waiting job pinned to a node Slurm cannot use would only wait out queue_timeout_s: give
    it up now, naming the node. A node that is only UNKNOWN has not registered with slurmctld
    since it (re)started (1 to 5 s on the test cluster): the job waits for it."""
    bad = {n: why for n, why in unusable_nodes.items() if state_words(why) != {"UNKNOWN"}}
    if not bad:
        return None
    names = ", ".join(f"{n} is {why}" for n, why in bad.items())
    why = f" (Slurm's reason: {reason})" if reason else ""
    return GiveUp(
        NodeLostError,
        f"cannot start while {state}{why}: {names}; cancelled at once rather than waiting queue_timeout_s.",
        lost=bad,
    )


def ending_on_lost(holders: Sequence[Holder], lost: Mapping[str, str]) -> str:
    """When every job holding a waiting job's nodes is one Slurm is still ending (COMPLETING) on
    a node this run lost, those jobs as one clause ("job 12 (x-probe) on node4"); else empty. A
    job whose launch failed on a dead node keeps its live nodes until slurmctld gives up on the
    dead one (about MessageTimeout), and a job waiting behind it waits for that, not for the node
    it asked for."""
    if not lost:
        return ""
    ending = [h for h in holders if h.state == "COMPLETING" and any(n in lost for n in h.nodes)]
    if not ending or len(ending) != len(holders):
        return ""
    names = sorted({n for h in ending for n in h.nodes if n in lost})
    return ", ".join(f"job {h.job_id} ({h.name})" for h in ending) + f" on {', '.join(names)}"


def after_outage(ended_ago_s: float | None) -> bool:
    """slurmctld is out or came back at most ``AFTER_OUTAGE_S`` ago (``ended_ago_s``: from
    ``Outages.ended_ago``). A job waiting then waits for the controller: it schedules again only
    from its next pass, and jobs that ended while it was away stay COMPLETING on their nodes
    until those report again."""
    return ended_ago_s is not None and ended_ago_s <= AFTER_OUTAGE_S


def excused_s(excused: float, step_s: float, behind_lost: bool, queue_limit_s: float) -> float:
    """Queue time not counted against queue_timeout_s: from the moment the job is seen behind a
    job Slurm is still ending on a lost node, or waits just after a controller outage
    (``after_outage``), until it starts, up to one more queue_timeout_s."""
    return min(queue_limit_s, excused + step_s) if behind_lost else excused


def excused_clause(excused: float) -> str:
    """What a queue timeout's message adds for the time not counted (``excused_s``)."""
    if excused < 1:
        return ""
    return f" (and {excused:.0f} s more not counted: it waited on Slurm, not on its nodes)"


def controller_gone(down_s: float | None, window_s: float) -> bool:
    """slurmctld has not answered for the retry window: no job starts without it, a fault of
    the cluster, not of its nodes."""
    return down_s is not None and down_s >= window_s


def queue_time_counted(waited_s: float, excused: float, outage_s: float) -> float:
    """Queue time that counts against queue_timeout_s: not the time behind a lost node's ending
    job, nor the time slurmctld did not answer (the controller's, not the nodes')."""
    return waited_s - excused - outage_s


def held_clause(nodes: Sequence[str], holders: Sequence[Holder], bad: Mapping[str, str]) -> str:
    """Why a job pinned to ``nodes`` may still wait, as one clause: the other jobs on those
    nodes, and ``bad`` (nodes of this run's jobs that Slurm cannot use or this run lost; a job
    that failed to launch on a dead node keeps the live nodes of its allocation until Slurm has
    ended it): "node3 held by job 23 (x-sharedfs), RUNNING on node3, node4; node4 is
    DOWN+NOT_RESPONDING (earlier jobs of this run ran there; Slurm may still be ending one)"."""
    parts = [f"{', '.join(n for n in nodes if n in h.nodes)} held by {h.describe()}" for h in holders]
    others = {n: why for n, why in bad.items() if n not in nodes}
    if others:
        names = ", ".join(f"{n} is {why}" for n, why in sorted(others.items()))
        parts.append(f"{names} (earlier jobs of this run ran there; Slurm may still be ending one)")
    return "; ".join(parts)


def behind_own_run(over_s: float, limit_min: int, holders: Sequence[Holder], run_prefix: str) -> bool:
    """A job past queue_timeout_s by ``over_s`` waits on when every job on its nodes is one of
    this run's own (named ``run_prefix...``; one still waiting at its barrier for a node that
    never came, say): they end within their own time limits, so the wait is not its nodes' fault.
    For at most one more of its own limit (``limit_min``), then it gives up as ever."""
    return over_s <= limit_min * 60 and bool(holders) and all(h.name.startswith(run_prefix) for h in holders)


def queue_timeout(
    state: str,
    queue_limit_s: float,
    excused: float,
    reason: str,
    held: str,
    other: bool,
    fault_sentence: str = "",
    *,
    controller_sentence: str = "",
) -> GiveUp:
    """The error for a job still waiting past queue_timeout_s: QueueHeldError when other work
    (``other``) holds its nodes; else QueueAfterOutageError just after a controller outage
    (``controller_sentence``: that outage's sentence, given only then); else QueueTimeoutError."""
    reason = reason or "reason unknown"
    if held:
        reason += f" ({held})"
    message = (
        f"still {state} after {queue_limit_s:.0f} s{excused_clause(excused)}: {reason}; cancelled. "
        "Check the partition's nodes (sinfo) or raise queue_timeout_s."
    )
    if other:
        return GiveUp(QueueHeldError, message, fault_sentence=fault_sentence)
    if controller_sentence:
        return GiveUp(QueueAfterOutageError, message, fault_sentence=controller_sentence)
    return GiveUp(QueueTimeoutError, message)


# --------------------------------------------------------------------------- while it runs


def requeued(state: str, controller_state: str | None) -> bool:
    """Slurm put the job back in the queue after it started. Accounting can lag the controller:
    right after the start sacct may still say PENDING for a job squeue already showed running,
    so only slurmctld's own word makes it a requeue."""
    return state in REQUEUED and controller_state in REQUEUED


def over_time_limit(state: str, running_s: float, timeout_min: int) -> GiveUp | None:
    """The error for a job that ran past its limit and Slurm's grace (a hung or suspended job)."""
    if running_s <= timeout_min * 60 + GRACE_S:
        return None
    return GiveUp(
        WallTimeoutError,
        f"still {state} {running_s:.0f} s after it started, past its "
        f"{timeout_min} min limit; cancelled (a hung or suspended job).",
    )


def not_responding_since(lost: Mapping[str, str], since: Mapping[str, float], now: float) -> dict[str, float]:
    """When each node now lost under the job was first seen so (nodes no longer lost drop out)."""
    return {node: since.get(node, now) for node in lost}


def lost_while_running(lost: Mapping[str, str], since: Mapping[str, float], now: float) -> bool:
    """A node under the running job is DOWN, failing or unknown to Slurm, or has not responded
    for NOT_RESPONDING_GRACE_S (``since``: from ``not_responding_since``)."""
    hard = [w for w in lost.values() if w.startswith("not known") or {"DOWN", "FAIL"} & state_words(w)]
    return bool(hard) or any(now - t >= NOT_RESPONDING_GRACE_S for t in since.values())


def nodes_lost(state: str, lost: Mapping[str, str], *, was_requeued: bool = False) -> GiveUp:
    """The error for a job that lost its nodes while running, or was put back in the queue."""
    names = ", ".join(f"{n} is {why}" for n, why in lost.items())
    if was_requeued:
        what = f"was put back in the queue ({state}) after it had started" + (f": {names}" if names else "")
    else:
        what = f"lost its node(s) while {state}: {names}"
    return GiveUp(NodeLostError, f"{what}; cancelled. Check slurmd there (scontrol show node).", lost=dict(lost))


def task_failed_long_ago(first_failure: float | None, now: float, grace_s: float, checked: int, tasks: int) -> bool:
    """One task failed over ``grace_s`` ago and another one (of ``tasks``, ``checked`` of which
    wrote their result) still runs: a rank that hangs would hold the job to its limit."""
    return tasks >= 2 and first_failure is not None and now - first_failure > grace_s and checked < tasks


# --------------------------------------------------------------------------- once it ended


def result_lag_s(state: str, lag_s: float | None) -> float:
    """How long missing results are waited for after the job ended (``lag_s``: the caller's)."""
    if lag_s is not None:
        return lag_s
    return RESULT_LAG_S if state in ("COMPLETED", "FINISHED", "GONE") else RESULT_LAG_FAILED_S


def never_started(ran: bool, record: Mapping[str, str], last_state: str, pending_reason: str) -> str | None:
    """For a job that ended: Slurm's state and reason when it never ran (cancelled or given up in
    the queue, so no node was allocated to it), else None. ``ran``: it was seen past the queue or
    had nodes; ``record``: what slurmctld still holds of it (``JobState``, ``Reason``);
    ``last_state``: its state as last seen; ``pending_reason``: the reason it last waited for."""
    if ran:
        return None
    state = record.get("JobState") or last_state or "ended"
    reason = record.get("Reason", "")
    if reason in ("", "None", "(null)"):
        reason = pending_reason
    waited = pending_reason if pending_reason not in ("", reason) else ""
    waited = f"; it waited for: {waited}" if waited else ""
    return f"Slurm says {state}" + (f", reason {reason}" if reason else "") + waited


def ran_on(listed: Sequence[str], pinned: Sequence[str], count: int, *, answered: bool = False) -> tuple[str, ...]:
    """The nodes a job of ``count`` nodes ran on: Slurm's ``listed`` nodes (empty: it never ran),
    or the nodes it was ``pinned`` to when those are exactly ``count`` and Slurm lists part of
    them, or none although a task ``answered`` (it did run). Accounting and the controller can
    hold part or none of the allocation of a job that ended while it started or completed."""
    full_pin = len(pinned) == count and len(set(pinned)) == count
    if full_pin and listed and len(listed) != count and set(listed) <= set(pinned):
        return tuple(pinned)
    if full_pin and not listed and answered:
        return tuple(pinned)
    return tuple(listed)


def silent_nodes(
    failed: Sequence[tuple[int, str]],
    where: Sequence[str],
    answered: set[str],
    job_id: str,
    state: str,
    no_files: Collection[str] = (),
) -> dict[str, str]:
    """Nodes every task of which wrote no result at all, in a job where another node's tasks did
    (``failed``: (task index, why); ``where``: each failed task's node, "?" when unknown).
    ``no_files``: the nodes whose tasks left not even a log file in the job's folder, which lies
    on the shared filesystem: such a node does not see that folder (or its tasks never started)."""
    if not answered:
        return {}
    silent: dict[str, list[int]] = {}
    for (index, why), node in zip(failed, where, strict=True):
        if node != "?" and why.startswith("no result"):
            silent.setdefault(node, []).append(index)
    short = {h.split(".")[0] for h in answered}
    nothing = (
        "silent: none of its tasks wrote even a log file into job {job}'s folder on the shared filesystem "
        "({state}) while other nodes' did: it does not see that folder there, or its tasks never started"
    )
    return {
        n: nothing.format(job=job_id, state=state)
        if n in no_files
        else f"silent: no task of it wrote a result in job {job_id} ({state}) while other nodes' did"
        for n in silent
        if n.split(".")[0] not in short
    }

"""Whose fault it is: the rules that tell a fault of the cluster (its controller, its shared
filesystem, other work in its queue) from a fault of a node, and that keep jobs which must run at
the same time from waiting on each other forever. Pure: Slurm's answers in, decisions out.

A node is rejected only for its own fault. What stops a check from outside the nodes is a
``ClusterFault`` (``errors.py``): the check is not judged, and no node is excluded or drained.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence

from pytest_gpucluster.errors import ClusterFault, LaunchError, NodeLostError
from pytest_gpucluster.slurm import Holder
from pytest_gpucluster.verdict.finding import Finding, Scope

# What a fault outside the nodes is about (``ClusterFault.what``) → a finding's scope.
FAULT_SCOPES: dict[str, Scope] = {
    "shared_fs": "shared_fs",
    "queue": "queue",
    "environment": "environment",
    "config": "config",
}


def cluster_fault(exc: BaseException | None) -> ClusterFault | None:
    """The fault outside the nodes that ``exc`` is, or was raised from; None for anything else
    (a judgement, a failed job, a lost node, a harness error)."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, ClusterFault):
            return exc
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return None


def fault_finding(fault: ClusterFault, *, node: str, tested: Sequence[str]) -> Finding:
    """The finding of a fault outside the nodes that stopped a check: not judged, on the nodes it
    kept from being judged (the nodes other work held, where a task found the environment
    wanting, and the check's own node), else every tested node; no node is its culprit."""
    held = getattr(fault, "held", None) or {}
    named = tuple(held) or tuple(getattr(fault, "nodes", ()) if fault.what in ("environment", "config") else ())
    # A per-node check stopped this way did not measure its own node either.
    nodes = tuple(dict.fromkeys([*named, *([node] if node else [])])) or tuple(tested)
    scope = FAULT_SCOPES.get(fault.what, "controller")
    setting = str(getattr(fault, "setting", "") or "")
    return Finding.outside(scope, fault.sentence, nodes=nodes, setting=setting, severity="not_judged")


def error_findings(
    exc: BaseException, *, node: str, tested: Sequence[str], lost: Collection[str] = ()
) -> list[Finding]:
    """The findings a check's ending in ``exc`` stands for, from the error's fields: a fault
    outside the nodes (``fault_finding``); nodes lost under a job, each its own culprit; a job
    whose tasks failed on some nodes, those nodes its culprits (on every node of several at once:
    a cause common to them, no culprit); any other failure the check's node's, or, in a check of
    no node, the tested nodes' together with no culprit; where that leaves a job of several
    nodes with no culprit, those of its nodes the run has lost (``lost``: found silent or gone,
    the job then ended for them). ``node``: the node a per-node check tests ("" for another
    check)."""
    original = getattr(exc, "original", None)  # a failure shared with an earlier test
    if isinstance(original, BaseException):
        exc = original
    fault = cluster_fault(exc)
    if fault is not None:
        return [fault_finding(fault, node=node, tested=tested)]
    text = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    if isinstance(exc, NodeLostError) and exc.lost:
        return [Finding.on_node(n, f"{n}: lost during the run: {why} ({text})") for n, why in exc.lost.items()]
    if isinstance(exc, LaunchError):
        nodes = tuple(exc.nodes) or ((node,) if node else tuple(tested))
        culprits = tuple(exc.culprits)
        if len(nodes) == 1:
            culprits = nodes  # one node ran it: whatever failed there is that node's
        elif set(culprits) >= set(nodes):
            culprits = ()  # every node failed alike: a cause common to all, none convicted
        gone = tuple(n for n in nodes if n in lost)
        if not culprits and gone and len(gone) < len(nodes):
            culprits = gone  # a job ended for a node the run lost under it: that node's fault
        return [Finding.across(nodes, text, culprits=culprits)]
    if node:
        return [Finding.on_node(node, text)]
    return [Finding.across(tested, text)]


# Every job of every run of this suite is named so (``gpucluster-RUN-...``).
SUITE_PREFIX = "gpucluster-"


def foreign_work(holders: Iterable[Holder]) -> list[Holder]:
    """Of the jobs holding nodes, those of no run of this suite: another user's training, a
    site's service. Another run of the suite holds a node for its own short jobs and takes turns
    with this one (``launch.together``); only foreign work is learned as holding a node for the
    rest of the run."""
    return [h for h in holders if not h.name.startswith(SUITE_PREFIX)]


def other_work(holders: Iterable[Holder], run_prefix: str) -> list[Holder]:
    """Of the jobs holding a waiting job's nodes, those that are not this run's own: another
    user's, or another run's (the run's jobs are named ``run_prefix...``). A job of this run that
    holds the nodes ends within its own time limit; other work may hold them for as long as it
    likes, and is then named as what kept the check from running."""
    return [h for h in holders if not h.name.startswith(run_prefix)]


def held_sentence(other: Sequence[Holder], nodes: Sequence[str], waited_s: float) -> str:
    """One sentence naming the other work that kept ``nodes`` past the queue bound."""
    jobs = "; ".join(h.describe() for h in other)
    return f"other work held {', '.join(nodes)} past queue_timeout_s ({waited_s:.0f} s): {jobs}"


# Jobs that must run at the same time carry their group's mark in their names
# (``gpucluster-RUN-isolation-pair@3f9a2c``), so another group's members can be told apart.
GROUP_MARK = "@"


def group_of(name: str) -> str:
    """The group a job's name marks it as a member of, or "" for a job of no group."""
    head, mark, tag = name.rpartition(GROUP_MARK)
    return tag if mark and head and tag.isalnum() else ""


def gives_way(
    group: Sequence[str], waiting: Sequence[str], running: Iterable[Holder], queued: Iterable[Holder]
) -> Holder | None:
    """For jobs that must run at the same time (``group``: their ids), of which ``waiting`` wait
    while the others run and hold their share: the job that the group must give way to (cancel
    its jobs and submit them again, behind it), or None to wait on.

    A member that runs holds what it has until the others start; the group gives way to
    * a job that runs on the waiting members' nodes and came after the group's first member
      (it slipped in between them: if it waits on a partner too, neither would ever start);
    * a job queued ahead of a waiting member for the same nodes (``queued``): Slurm starts it
      first, and it may need what the running member holds.
    A job of another group counts only if that group is younger (its first job came after
    this group's first), so of two groups that hold part of each other's nodes exactly one
    gives way. A job that ran before the group began is waited for, bounded by queue_timeout_s."""
    mine = set(group)
    first = min(int(i) for i in group)
    last_waiting = max(int(i) for i in waiting)
    others = [h for h in (*running, *queued) if h.job_id not in mine and h.job_id.isdigit()]
    group_first: dict[str, int] = {}
    for h in others:
        tag = group_of(h.name)
        if tag:
            group_first[tag] = min(group_first.get(tag, int(h.job_id)), int(h.job_id))

    def younger_group(h: Holder) -> bool | None:
        tag = group_of(h.name)
        return group_first[tag] > first if tag else None

    blocking = [
        h
        for h in others
        if (h.state != "PENDING" and (younger_group(h) if group_of(h.name) else int(h.job_id) > first))
        or (h.state == "PENDING" and int(h.job_id) < last_waiting and younger_group(h) is not False)
    ]
    # The one to name: a job queued ahead before one that merely runs beside.
    return min(blocking, key=lambda h: (h.state != "PENDING", int(h.job_id))) if blocking else None


def srun_missed_controller(stderr_text: str) -> str:
    """The line of srun in a batch step's stderr that says it could not reach slurmctld (to
    confirm the allocation or create the job's step), or empty. srun failing to reach a node
    (``Task launch for StepId=... failed on node ...``, ``Application launch failed:
    Communication connection failure``) is that node's and is not such a line."""
    for line in stderr_text.splitlines():
        text = line.strip()
        if text.startswith("srun:") and "unable to contact slurm controller" in text.lower():
            return text
    return ""

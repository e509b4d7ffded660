"""Whose fault it is: the rules that tell a fault of the cluster (its controller, its shared
filesystem, other work in its queue) from a fault of a node, and that keep jobs which must run at
the same time from waiting on each other forever. Pure: Slurm's answers in, decisions out.

A node is rejected only for its own fault. What stops a check from outside the nodes is a
``ClusterFault`` (``errors.py``): the check is not judged, and no node is excluded or drained.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from pytest_gpucluster.errors import ClusterFault
from pytest_gpucluster.slurm import Holder


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


def gives_way(group: Sequence[str], holders: Iterable[Holder]) -> Holder | None:
    """For jobs that must run at the same time (``group``: their ids) of which some run and some
    wait: the job, started after the group's first, that holds what the waiting ones need, or
    None. Such a job slipped in between the group's members: if it waits on a partner too (another
    run's pair), neither would ever start, so the group gives way (cancels and submits its jobs
    again, behind it). A holder older than the group's first job gives no such reason: the group
    waits for it, bounded by queue_timeout_s."""
    first = min(int(i) for i in group)
    mine = set(group)
    later = [h for h in holders if h.job_id not in mine and h.job_id.isdigit() and int(h.job_id) > first]
    return min(later, key=lambda h: int(h.job_id)) if later else None


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

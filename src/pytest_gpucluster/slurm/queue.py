"""The queue and the jobs in it: states and reasons, the nodes a job holds, what holds or waits
for given nodes, cancelling."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import NamedTuple

from pytest_gpucluster.errors import DaemonUnreachable, SlurmQueryError
from pytest_gpucluster.slurm import commands
from pytest_gpucluster.slurm.hostlist import parse_hostlist


def job_nodes(job_id: str, expected: int | None = None) -> tuple[str, ...]:
    """The nodes a job ran or runs on, from accounting, else from the controller's memory of it.
    When accounting lists fewer than ``expected`` nodes (its record can hold part of the
    allocation, e.g. for a job cancelled right after it started), the controller is asked too and
    its list is taken if it is the full one."""
    try:
        out = commands.run(["sacct", "-X", "-n", "-P", "-j", job_id, "-o", "NodeList"])
    except SlurmQueryError:
        record = controller_job(job_id) or {}
        return commands.expand_hostlist(record.get("NodeList", ""))
    lines = [line.strip() for line in out.splitlines() if line.strip()]
    nodes = commands.expand_hostlist(lines[0]) if lines else ()
    if expected is not None and len(nodes) != expected:
        try:
            record = controller_job(job_id) or {}
        except SlurmQueryError:
            return nodes
        held = commands.expand_hostlist(record.get("NodeList", ""))
        if len(held) == expected:
            return held
    return nodes


def parse_controller_job(text: str) -> dict[str, str]:
    """``JobState``, ``ExitCode``, ``NodeList`` and ``Reason`` from ``scontrol show job -o ID``."""
    return {
        key: m.group(1)
        for key in ("JobState", "ExitCode", "NodeList", "Reason")
        if (m := re.search(rf"(?:^|\s){key}=(\S+)", text))
    }


def controller_job(job_id: str) -> dict[str, str] | None:
    """What slurmctld still holds about a job (it keeps ended jobs for MinJobAge, 300 s by
    default): works without accounting. None once it forgot the job."""
    try:
        out = commands.run(["scontrol", "show", "job", "-o", job_id])
    except SlurmQueryError as exc:
        if "Invalid job id" in str(exc):
            return None
        raise
    return parse_controller_job(out) or None


def queue_entries(job_ids: Iterable[str]) -> dict[str, tuple[str, str]]:
    """One squeue for many jobs: job id → (state, reason) for each job the queue still lists.
    A job missing from the answer has left the queue: squeue leaves unknown ids out of a list
    of several and refuses a list of one."""
    ids = sorted(set(job_ids))
    if not ids:
        return {}
    try:
        out = commands.run(["squeue", "-h", "-j", ",".join(ids), "-o", "%i|%T|%r"])
    except SlurmQueryError as exc:
        if "Invalid job id" in str(exc):
            return {}
        raise
    entries: dict[str, tuple[str, str]] = {}
    for line in out.splitlines():
        job_id, _, rest = line.strip().partition("|")
        state, _, reason = rest.partition("|")
        if job_id and state:
            entries[job_id] = (state.upper(), reason)
    return entries


def nudge_scheduler(job_id: str) -> None:
    """Ask slurmctld to schedule now, by an update of a pending job that changes nothing (its
    own nice value). Nodes freed when Slurm gives up ending a job on a dead node start no
    scheduling pass of their own; without this, a job waiting for them starts only at the
    next backfill cycle (``bf_interval``, 30 s by default)."""
    nice = commands.run(["squeue", "-h", "-j", job_id, "-o", "%y"]).strip()
    if nice.lstrip("-").isdigit():
        commands.run(["scontrol", "update", f"JobId={job_id}", f"Nice={nice}"])


def my_queue() -> dict[str, str]:
    """This user's jobs the queue still lists (pending, running, completing): id → name."""
    out = commands.run(["squeue", "--me", "-h", "-o", "%i|%j"])
    return dict(line.split("|", 1) for line in out.splitlines() if "|" in line)


class Holder(NamedTuple):
    """A job that runs (or ends) on nodes another job waits for: what ``squeue`` says of it."""

    job_id: str
    name: str
    state: str
    nodes: tuple[str, ...]
    user: str = ""

    def describe(self) -> str:
        """``job 23 of alice (train-llm), RUNNING on node[1-2]``."""
        of = f" of {self.user}" if self.user else ""
        where = "for" if self.state == "PENDING" else "on"
        return f"job {self.job_id}{of} ({self.name}), {self.state} {where} {', '.join(self.nodes) or 'its nodes'}"


def parse_holders(text: str) -> list[tuple[str, ...]]:
    """``squeue -h -o "%i|%j|%T|%N|%u"`` lines → (job id, name, state, hostlist[, user]) tuples."""
    rows = [line.strip().split("|", 4) for line in text.splitlines() if line.count("|") >= 3]
    return [tuple(r) for r in rows]


def holders(nodes: tuple[str, ...]) -> list[Holder]:
    """Jobs that run or end on any of ``nodes`` (any user's), with their user."""
    if not nodes:
        return []
    out = commands.run(
        [
            "squeue",
            "-h",
            "-t",
            "RUNNING,COMPLETING,CONFIGURING,SUSPENDED",
            "-w",
            ",".join(nodes),
            "-o",
            "%i|%j|%T|%N|%u",
        ]
    )
    return _holder_rows(out)


def queued_for(nodes: tuple[str, ...]) -> list[Holder]:
    """Pending jobs (any user's) that asked for any of ``nodes`` by name (``--nodelist``), with
    the nodes they asked for: what Slurm starts ahead of a later job pinned to those nodes."""
    if not nodes:
        return []
    out = commands.run(["squeue", "-h", "-t", "PENDING", "-o", "%i|%j|%T|%n|%u"])
    wanted = set(nodes)
    return [h for h in _holder_rows(out) if wanted & set(h.nodes)]


def _holder_rows(out: str) -> list[Holder]:
    rows = []
    for r in parse_holders(out):
        try:
            hosts = parse_hostlist(r[3]) if r[3] not in ("", "(null)") else ()
        except ValueError:
            hosts = ()
        rows.append(Holder(r[0], r[1], r[2], hosts, r[4] if len(r) > 4 else ""))
    return rows


def cancel(job_id: str) -> None:
    """``scancel JOB``; a job that has already ended is no error."""
    try:
        commands.run(["scancel", job_id])
    except DaemonUnreachable:
        raise
    except SlurmQueryError as exc:
        if "Invalid job id" not in str(exc) and "already" not in str(exc):
            raise


def cancel_by_name_prefix(prefix: str) -> list[str]:
    """Cancel this user's jobs whose name starts with ``prefix``; returns their ids."""
    ids = [job_id for job_id, name in my_queue().items() if name.startswith(prefix)]
    if ids:
        commands.run(["scancel", *ids])
    return ids


def queue_state(job_id: str) -> str | None:
    """The job's state as the queue sees it (``PENDING``, ``RUNNING``, ...), or None once the
    queue no longer lists it. Works without accounting, unlike sacct."""
    try:
        out = commands.run(["squeue", "-h", "-j", job_id, "-o", "%T"])
    except SlurmQueryError as exc:
        if "Invalid job id" in str(exc):
            return None
        raise
    lines = [line.strip() for line in out.splitlines() if line.strip()]
    if lines:
        return lines[0].upper()
    # squeue lists no ended job; the controller still knows how it ended.
    record = controller_job(job_id)
    return record["JobState"].upper() if record and "JobState" in record else None

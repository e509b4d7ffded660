"""The queue and the jobs in it: states and reasons, the nodes a job holds, what holds or waits
for given nodes, cancelling."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import NamedTuple

from pytest_gpucluster.errors import DaemonUnreachable, SlurmQueryError
from pytest_gpucluster.slurm import commands
from pytest_gpucluster.slurm.commands import Slurm
from pytest_gpucluster.slurm.hostlist import parse_hostlist


def job_nodes(client: Slurm, job_id: str, expected: int | None = None) -> tuple[str, ...]:
    """The nodes a job ran or runs on, from accounting, else from the controller's memory of it.
    When accounting lists fewer than ``expected`` nodes (its record can hold part of the
    allocation, e.g. for a job cancelled right after it started), the controller is asked too and
    its list is taken if it is the full one."""
    try:
        listed = accounted_nodes(client, job_id)
    except SlurmQueryError:
        record = controller_job(client, job_id) or {}
        return commands.expand_hostlist(client, record.get("NodeList", ""))
    nodes = commands.expand_hostlist(client, listed)
    if expected is not None and len(nodes) != expected:
        try:
            record = controller_job(client, job_id) or {}
        except SlurmQueryError:
            return nodes
        held = commands.expand_hostlist(client, record.get("NodeList", ""))
        if len(held) == expected:
            return held
    return nodes


def accounted_nodes(client: Slurm, job_id: str) -> str:
    """The hostlist accounting holds for a job (``None assigned`` while it waits, empty when
    accounting has no record of it yet): ``sacct --json``, which every Slurm since 21.08 filters by
    job id, else sacct's one-field text form where this sacct has no JSON output."""
    if not client.sacct_text_only:
        try:
            return parse_sacct_nodes(client.run(["sacct", "--json", "-j", job_id]), job_id)
        except SlurmQueryError as exc:
            if not _no_json_output(str(exc)):
                raise
            client.sacct_text_only = True  # later reads go straight to text
    out = client.run(["sacct", "-X", "-n", "-P", "-j", job_id, "-o", "NodeList"])
    lines = [line.strip() for line in out.splitlines() if line.strip()]
    return lines[0] if lines else ""


def _no_json_output(failure: str) -> bool:
    """Whether a failed ``sacct --json`` says this sacct has no JSON output (a Slurm before 21.08,
    or one built without its JSON plugin), not that accounting failed."""
    low = failure.lower()
    return any(words in low for words in ("unrecognized option", "printed no valid json", "json plugin"))


def parse_sacct_nodes(text: str, job_id: str) -> str:
    """The hostlist of job ``job_id`` in ``sacct --json`` output (``jobs[].nodes``): empty when
    accounting lists no such job yet (``jobs`` empty, with the error "Nothing found with query").
    SlurmQueryError when the text is no JSON."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SlurmQueryError(f"`sacct --json -j {job_id}` printed no valid JSON ({exc}).") from None
    jobs = data.get("jobs") if isinstance(data, dict) else None
    for job in jobs or []:
        if isinstance(job, dict) and str(job.get("job_id", "")) == job_id:
            return str(job.get("nodes") or "")
    return ""


def parse_controller_job(text: str) -> dict[str, str]:
    """``JobState``, ``ExitCode``, ``NodeList`` and ``Reason`` from ``scontrol show job -o ID``."""
    return {
        key: m.group(1)
        for key in ("JobState", "ExitCode", "NodeList", "Reason")
        if (m := re.search(rf"(?:^|\s){key}=(\S+)", text))
    }


def controller_job(client: Slurm, job_id: str) -> dict[str, str] | None:
    """What slurmctld still holds about a job (it keeps ended jobs for MinJobAge, 300 s by
    default): works without accounting. None once it forgot the job."""
    try:
        out = client.run(["scontrol", "show", "job", "-o", job_id])
    except SlurmQueryError as exc:
        if "Invalid job id" in str(exc):
            return None
        raise
    return parse_controller_job(out) or None


def queue_entries(client: Slurm, job_ids: Iterable[str]) -> dict[str, tuple[str, str]]:
    """One squeue for many jobs: job id → (state, reason) for each job the queue still lists.
    A job missing from the answer has left the queue: squeue leaves unknown ids out of a list
    of several and refuses a list of one."""
    ids = sorted(set(job_ids))
    if not ids:
        return {}
    try:
        out = client.run(["squeue", "-h", "-j", ",".join(ids), "-o", "%i|%T|%r"])
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


def nudge_scheduler(client: Slurm, job_id: str) -> None:
    """Ask slurmctld to schedule now, by an update of a pending job that changes nothing (its
    own nice value). Nodes freed when Slurm gives up ending a job on a dead node start no
    scheduling pass of their own; without this, a job waiting for them starts only at the
    next backfill cycle (``bf_interval``, 30 s by default)."""
    nice = client.run(["squeue", "-h", "-j", job_id, "-o", "%y"]).strip()
    if nice.lstrip("-").isdigit():
        client.run(["scontrol", "update", f"JobId={job_id}", f"Nice={nice}"])


def my_queue(client: Slurm) -> dict[str, str]:
    """This user's jobs the queue still lists (pending, running, completing): id → name."""
    out = client.run(["squeue", "--me", "-h", "-o", "%i|%j"])
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


# squeue's fields for the jobs on or waiting for nodes: the job name, the one field that may hold
# a '|', comes last, so every other field reads true whatever a job is called.
HOLDER_FIELDS = "%i|%T|%N|%u|%j"
PENDING_FIELDS = "%i|%T|%n|%u|%j"  # %n: the nodes a pending job asked for by name


def parse_holders(text: str) -> list[Holder]:
    """``squeue -h -o "%i|%T|%N|%u|%j"`` lines → one ``Holder`` each. The name is the rest of the
    line after the fourth '|'; a hostlist Slurm does not give (``(null)``, none yet) is no node."""
    rows = []
    for line in text.splitlines():
        fields = line.split("|", 4)
        if len(fields) < 5 or not fields[0].strip():
            continue
        job_id, state, hosts, user, name = fields
        try:
            nodes = parse_hostlist(hosts) if hosts.strip() not in ("", "(null)") else ()
        except ValueError:
            nodes = ()
        rows.append(Holder(job_id.strip(), name, state.strip(), nodes, user.strip()))
    return rows


def holders(client: Slurm, nodes: tuple[str, ...]) -> list[Holder]:
    """Jobs that run or end on any of ``nodes`` (any user's), with their user."""
    if not nodes:
        return []
    out = client.run(
        [
            "squeue",
            "-h",
            "-t",
            "RUNNING,COMPLETING,CONFIGURING,SUSPENDED",
            "-w",
            ",".join(nodes),
            "-o",
            HOLDER_FIELDS,
        ]
    )
    return parse_holders(out)


def queued_for(client: Slurm, nodes: tuple[str, ...]) -> list[Holder]:
    """Pending jobs (any user's) that asked for any of ``nodes`` by name (``--nodelist``), with
    the nodes they asked for: what Slurm starts ahead of a later job pinned to those nodes."""
    if not nodes:
        return []
    out = client.run(["squeue", "-h", "-t", "PENDING", "-o", PENDING_FIELDS])
    wanted = set(nodes)
    return [h for h in parse_holders(out) if wanted & set(h.nodes)]


def cancel(client: Slurm, job_id: str) -> None:
    """``scancel JOB``; a job that has already ended is no error."""
    try:
        client.run(["scancel", job_id])
    except DaemonUnreachable:
        raise
    except SlurmQueryError as exc:
        if "Invalid job id" not in str(exc) and "already" not in str(exc):
            raise


def cancel_by_name_prefix(client: Slurm, prefix: str) -> list[str]:
    """Cancel this user's jobs whose name starts with ``prefix``; returns their ids."""
    ids = [job_id for job_id, name in my_queue(client).items() if name.startswith(prefix)]
    if ids:
        client.run(["scancel", *ids])
    return ids


def queue_state(client: Slurm, job_id: str) -> str | None:
    """The job's state as the queue sees it (``PENDING``, ``RUNNING``, ...), or None once the
    queue no longer lists it. Works without accounting, unlike sacct."""
    try:
        out = client.run(["squeue", "-h", "-j", job_id, "-o", "%T"])
    except SlurmQueryError as exc:
        if "Invalid job id" in str(exc):
            return None
        raise
    lines = [line.strip() for line in out.splitlines() if line.strip()]
    if lines:
        return lines[0].upper()
    # squeue lists no ended job; the controller still knows how it ended.
    record = controller_job(client, job_id)
    return record["JobState"].upper() if record and "JobState" in record else None

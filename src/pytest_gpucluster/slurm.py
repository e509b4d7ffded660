"""Questions the login node asks Slurm. Every command has a timeout and an argv list (no shell);
JSON output is preferred to parsing text.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, NamedTuple

from pytest_gpucluster.errors import DaemonUnreachable, SlurmQueryError
from pytest_gpucluster.slurm_retry import OUTAGES

TIMEOUT_S = 30.0


def run(argv: list[str], timeout_s: float = TIMEOUT_S) -> str:
    """Run a Slurm client command; its stdout, or SlurmQueryError naming the command. A failure
    that says the daemon could not be reached is tried again until the daemon has not answered
    for the retry window (``slurm_retry``), then raises ``DaemonUnreachable``."""
    return OUTAGES.attempt(argv[0], lambda: _run_once(argv, timeout_s))


def _run_once(argv: list[str], timeout_s: float) -> str:
    if shutil.which(argv[0]) is None:
        raise SlurmQueryError(f"`{argv[0]}` is not on PATH; is slurm-client installed on this login node?")
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        raise SlurmQueryError(f"`{' '.join(argv)}` did not answer within {timeout_s:.0f} s.") from None
    if proc.returncode != 0:
        raise SlurmQueryError(
            f"`{' '.join(argv)}` exited {proc.returncode}: {telling_line(proc.stderr or proc.stdout)}"
        )
    return proc.stdout


def telling_line(text: str) -> str:
    """The line of a client's output that says what went wrong: the last one that is not a
    banner of asterisks (``scontrol ping`` frames "RESTORE SLURMCTLD DAEMON TO SERVICE" in them)."""
    lines = [line.strip() for line in text.strip().splitlines()]
    said = [line for line in lines if line and not line.startswith("**") and set(line) != {"*"}]
    return said[-1] if said else (lines[-1] if lines else "no output")


def run_json(argv: list[str], timeout_s: float = TIMEOUT_S) -> dict[str, Any]:
    """Run a command with ``--json`` output and parse it. A listing that carries only errors (what
    ``sinfo --json`` prints, exiting 0, while slurmctld is down) is no answer: retried as a
    command that could not reach its daemon."""
    return OUTAGES.attempt(argv[0], lambda: _parse_json(argv, _run_once(argv, timeout_s)))


def _parse_json(argv: list[str], out: str) -> dict[str, Any]:
    try:
        data: dict[str, Any] = json.loads(out)
    except json.JSONDecodeError as exc:
        raise SlurmQueryError(f"`{' '.join(argv)}` printed no valid JSON ({exc}).") from None
    errors = data.get("errors") or []
    if errors and not any(data.get(key) for key in ("nodes", "jobs", "partitions")):
        said = "; ".join(str(e.get("error", e)) if isinstance(e, dict) else str(e) for e in errors)
        raise SlurmQueryError(f"`{' '.join(argv)}` reported errors and no data: {said}")
    return data


def answers(daemon: str) -> bool:
    """One try, no retry: whether ``daemon`` (``slurmctld``, ``slurmdbd``) answers now."""
    argv = ["sacct", "-X", "-n", "-j", "1"] if daemon == "slurmdbd" else ["scontrol", "ping"]
    try:
        _run_once(argv, TIMEOUT_S)
    except SlurmQueryError:
        return False
    OUTAGES.answered(daemon)
    return True


def version() -> str:
    """``22.05.8`` etc."""
    return run(["sinfo", "--version"]).split()[-1]


def expand_hostlist(hostlist: str) -> tuple[str, ...]:
    """``node[1-3]`` → node1, node2, node3, through Slurm itself."""
    if not hostlist or hostlist in ("None assigned", "(null)"):
        return ()
    return tuple(run(["scontrol", "show", "hostnames", hostlist]).split())


# A hostlist naming more nodes than this is a typo (node[1-100000]), not a cluster.
MAX_HOSTLIST = 65536
_HOST_NAME = re.compile(r"^[A-Za-z0-9_.\-]+$")


def parse_hostlist(text: str) -> tuple[str, ...]:
    """A Slurm hostlist read without Slurm: ``gpu-[01-03,07],login1`` → gpu-01, gpu-02, gpu-03,
    gpu-07, login1 (ranges keep their zero padding; several brackets in one name multiply, as in
    Slurm). ValueError says what cannot be read and why: an unclosed or stray bracket, a range
    that counts down, a character no host name has."""
    names: list[str] = []
    for part in _hostlist_parts(text.replace(" ", "")):
        if part:  # "a,,b" names a and b, as Slurm reads it
            names += _expand_hosts(part)
        if len(names) > MAX_HOSTLIST:
            raise ValueError(f"names more than {MAX_HOSTLIST} nodes")
    if not names:
        raise ValueError("no node named")
    return tuple(dict.fromkeys(names))


def _hostlist_parts(text: str) -> list[str]:
    """``text`` split at the commas outside brackets; ValueError for unbalanced brackets."""
    parts: list[str] = []
    start, opened = 0, -1
    for i, ch in enumerate(text):
        if ch == "[":
            if opened >= 0:
                raise ValueError(f"'[' at character {i + 1} opens inside another '[': {text!r}")
            opened = i
        elif ch == "]":
            if opened < 0:
                raise ValueError(f"']' at character {i + 1} closes no '[': {text!r}")
            opened = -1
        elif ch == "," and opened < 0:
            parts.append(text[start:i])
            start = i + 1
    if opened >= 0:
        raise ValueError(f"'[' at character {opened + 1} is never closed: {text!r}")
    parts.append(text[start:])
    return parts


def _expand_hosts(part: str) -> list[str]:
    """One comma-free piece of a hostlist, every bracket expanded."""
    match = re.fullmatch(r"([^\[]*)\[([^\]]*)\](.*)", part)
    if match is None:
        if not _HOST_NAME.match(part):
            raise ValueError(f"{part!r} is not a host name (letters, digits, '_', '.', '-')")
        return [part]
    head, ranges, rest = match.groups()
    if head and not _HOST_NAME.match(head):
        raise ValueError(f"{head!r} in {part!r} is not the start of a host name")
    if not ranges:
        raise ValueError(f"empty brackets in {part!r}")
    numbers: list[str] = []
    for item in ranges.split(","):
        lo, dash, hi = item.partition("-")
        if not lo.isdigit() or (dash and not hi.isdigit()):
            raise ValueError(f"{item!r} in {part!r} is not a number or a range such as 1-4")
        first, last = int(lo), int(hi or lo)
        if last < first:
            raise ValueError(f"{item!r} in {part!r} counts down; write {hi}-{lo}")
        if last - first >= MAX_HOSTLIST:
            raise ValueError(f"{item!r} in {part!r} names more than {MAX_HOSTLIST} nodes")
        numbers += [f"{i:0{len(lo)}d}" for i in range(first, last + 1)]
    tails = _expand_hosts(rest) if rest else [""]
    if len(numbers) * len(tails) > MAX_HOSTLIST:
        raise ValueError(f"{part!r} names more than {MAX_HOSTLIST} nodes")
    return [f"{head}{n}{t}" for n in numbers for t in tails]


def job_nodes(job_id: str, expected: int | None = None) -> tuple[str, ...]:
    """The nodes a job ran or runs on, from accounting, else from the controller's memory of it.
    When accounting lists fewer than ``expected`` nodes (its record can hold part of the
    allocation, e.g. for a job cancelled right after it started), the controller is asked too and
    its list is taken if it is the full one."""
    try:
        out = run(["sacct", "-X", "-n", "-P", "-j", job_id, "-o", "NodeList"])
    except SlurmQueryError:
        record = controller_job(job_id) or {}
        return expand_hostlist(record.get("NodeList", ""))
    lines = [line.strip() for line in out.splitlines() if line.strip()]
    nodes = expand_hostlist(lines[0]) if lines else ()
    if expected is not None and len(nodes) != expected:
        try:
            record = controller_job(job_id) or {}
        except SlurmQueryError:
            return nodes
        held = expand_hostlist(record.get("NodeList", ""))
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
        out = run(["scontrol", "show", "job", "-o", job_id])
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
        out = run(["squeue", "-h", "-j", ",".join(ids), "-o", "%i|%T|%r"])
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
    nice = run(["squeue", "-h", "-j", job_id, "-o", "%y"]).strip()
    if nice.lstrip("-").isdigit():
        run(["scontrol", "update", f"JobId={job_id}", f"Nice={nice}"])


def _text(value: Any) -> str:
    if isinstance(value, list):
        return ",".join(str(v) for v in value)
    return "" if value is None else str(value)


@dataclass(frozen=True)
class NodeInfo:
    """One node as Slurm's JSON (``sinfo --json`` / ``scontrol --json show nodes``) describes it."""

    name: str
    state: str  # e.g. "IDLE", "MIXED", "DOWN+NOT_RESPONDING", "IDLE+DRAIN"
    reason: str
    partitions: tuple[str, ...]
    gres: str
    cpus: int
    real_memory_mb: int

    @property
    def usable(self) -> bool:
        """Idle, mixed or allocated, and not draining, down or failing."""
        parts = set(self.state.upper().replace("+", " ").split())
        bad = {
            "DOWN",
            "DRAIN",
            "DRAINED",
            "DRAINING",
            "FAIL",
            "FAILING",
            "NOT_RESPONDING",
            "MAINTENANCE",
            "REBOOT_REQUESTED",
            "INVALID_REG",
            "FUTURE",
            "UNKNOWN",
        }
        good = {"IDLE", "MIXED", "ALLOCATED", "COMPLETING"}
        return bool(parts & good) and not parts & bad

    @property
    def gpus(self) -> int:
        """GPU count from the GRES string (``gpu:4``, ``gpu:h100:8(S:0-1)``)."""
        total = 0
        for item in self.gres.split(","):
            fields = item.split("(")[0].split(":")
            if fields[0] == "gpu" and fields[-1].isdigit():
                total += int(fields[-1])
        return total


def _number(value: Any) -> int:
    """An integer field of Slurm's JSON: a plain number, or ``{"set": true, "number": 4}``
    (Slurm 23.11 and later)."""
    if isinstance(value, dict):
        value = value.get("number", 0) if value.get("set", True) else 0
    try:
        return int(value or 0)
    except (TypeError, ValueError):
        return 0


def parse_nodes(data: dict[str, Any]) -> list[NodeInfo]:
    """Nodes from ``sinfo --json`` (Slurm 22.05: ``state`` a word plus ``state_flags``) or
    ``scontrol --json show nodes`` (23.02 and later: ``state`` a list of words)."""
    nodes = []
    for raw in data.get("nodes", []):
        state = raw.get("state", "")
        words = [str(w).upper() for w in state] if isinstance(state, list) else [_text(state).upper()]
        words += [str(f).upper() for f in raw.get("state_flags", []) or [] if str(f).upper() not in words]
        nodes.append(
            NodeInfo(
                name=str(raw.get("name", "")),
                state="+".join(w for w in words if w),
                reason=_text(raw.get("reason", "")),
                partitions=tuple(raw.get("partitions", []) or []),
                gres=_text(raw.get("gres", "")),
                cpus=_number(raw.get("cpus")),
                real_memory_mb=_number(raw.get("real_memory")),
            )
        )
    return nodes


def nodes() -> list[NodeInfo]:
    """Every node the controller knows. Slurm 22.05's scontrol has no ``--json`` but its
    ``sinfo --json`` lists nodes; from 23.02 sinfo groups nodes and ``scontrol --json`` answers."""
    data = run_json(["sinfo", "--json"])
    if "nodes" not in data:
        data = run_json(["scontrol", "--json", "show", "nodes"])
    return parse_nodes(data)


def partition_nodes(partition: str | None) -> list[NodeInfo]:
    """Nodes of ``partition`` (all nodes when None), sorted by name."""
    return sorted((n for n in nodes() if partition is None or partition in n.partitions), key=lambda n: n.name)


def my_queue() -> dict[str, str]:
    """This user's jobs the queue still lists (pending, running, completing): id → name."""
    out = run(["squeue", "--me", "-h", "-o", "%i|%j"])
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
    out = run(
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
    out = run(["squeue", "-h", "-t", "PENDING", "-o", "%i|%j|%T|%n|%u"])
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
        run(["scancel", job_id])
    except DaemonUnreachable:
        raise
    except SlurmQueryError as exc:
        if "Invalid job id" not in str(exc) and "already" not in str(exc):
            raise


def cancel_by_name_prefix(prefix: str) -> list[str]:
    """Cancel this user's jobs whose name starts with ``prefix``; returns their ids."""
    ids = [job_id for job_id, name in my_queue().items() if name.startswith(prefix)]
    if ids:
        run(["scancel", *ids])
    return ids


# --------------------------------------------------------------------------- cluster health
# Questions of the Slurm health check. Each ``*_problems`` function returns
# one sentence per fault, naming the node or partition, so the test lists them all at once.


@dataclass(frozen=True)
class PartitionInfo:
    """One partition as ``scontrol -o show partition`` prints it."""

    name: str
    state: str  # UP, DOWN, DRAIN, INACTIVE
    default: bool
    nodes: str  # Slurm hostlist, e.g. "node[1-2]"
    total_nodes: int


def parse_partitions(text: str) -> list[PartitionInfo]:
    """Partitions from ``scontrol -o show partition`` (one ``Key=Value`` line each). Text, not
    JSON: Slurm 22.05 prints partition state in no JSON form."""
    out = []
    for line in text.splitlines():
        fields = dict(item.split("=", 1) for item in line.split() if "=" in item)
        if "PartitionName" not in fields:
            continue
        out.append(
            PartitionInfo(
                name=fields["PartitionName"],
                state=fields.get("State", "UNKNOWN").upper(),
                default=fields.get("Default", "NO").upper() == "YES",
                nodes=fields.get("Nodes", ""),
                total_nodes=_number(fields.get("TotalNodes")),
            )
        )
    return out


def partitions() -> list[PartitionInfo]:
    """Every partition the controller knows."""
    return parse_partitions(run(["scontrol", "-o", "show", "partition"]))


def controller_problems() -> list[str]:
    """Empty when every configured slurmctld answers ``scontrol ping`` with UP."""
    try:
        out = run(["scontrol", "ping"])
    except SlurmQueryError as exc:
        return [str(exc)]
    return parse_ping(out)


def parse_ping(text: str) -> list[str]:
    """Problems in ``scontrol ping`` output (``Slurmctld(primary) at HOST is UP``): a backup
    controller that is DOWN is a problem too, since failover would not work."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if not lines:
        return ["`scontrol ping` printed nothing; is slurmctld configured (SlurmctldHost)?"]
    return [f"{line} (scontrol ping)" for line in lines if not line.endswith(" is UP")]


def partition_problems(name: str | None, found: list[PartitionInfo]) -> list[str]:
    """The partition ``name`` (the default one when None) exists and is UP."""
    if name is None:
        defaults = [p for p in found if p.default]
        if not defaults:
            return ["no default partition and the profile names none; set partition in the profile"]
        chosen = defaults[0]
    else:
        matches = [p for p in found if p.name == name]
        if not matches:
            known = ", ".join(p.name for p in found) or "none"
            return [f"partition {name!r} does not exist (partitions: {known})"]
        chosen = matches[0]
    if chosen.state != "UP":
        return [
            f"partition {chosen.name!r} is {chosen.state}, not UP (scontrol update partitionname="
            f"{chosen.name} state=up)"
        ]
    return []


def default_partition(found: list[PartitionInfo]) -> str | None:
    """The name of the partition jobs go to when none is named."""
    return next((p.name for p in found if p.default), None)


def node_state_problems(
    known: list[NodeInfo], *, partition: str | None, expected: int, nodelist: tuple[str, ...] = ()
) -> list[str]:
    """Every node of the partition (or of ``nodelist``) that is not usable, with its state and
    Slurm's reason, and a shortfall of usable nodes against ``expected``."""
    where = f"partition {partition!r}" if partition else "the cluster"
    members = [n for n in known if partition is None or partition in n.partitions]
    problems: list[str] = []
    if nodelist:
        by_name = {n.name: n for n in members}
        problems += [f"{name}: not in {where}" for name in nodelist if name not in by_name]
        members = [by_name[name] for name in nodelist if name in by_name]
    for n in members:
        if not n.usable:
            why = f", reason: {n.reason!r}" if n.reason else ""
            problems.append(f"{n.name}: state {n.state}{why}")
    usable = [n for n in members if n.usable]
    if len(usable) < expected:
        problems.append(f"{where} has {len(usable)} usable node(s) of {expected} expected")
    return problems


def node_resource_problems(
    known: list[NodeInfo], *, gpus: int | None, min_cpus: int | None = None, min_memory_mb: int | None = None
) -> list[str]:
    """Nodes advertising a GRES GPU count other than ``gpus``, fewer CPUs than ``min_cpus`` or
    less RealMemory than ``min_memory_mb`` (each bound skipped when None)."""
    problems = []
    for n in known:
        if gpus is not None and n.gpus != gpus:
            problems.append(f"{n.name}: advertises {n.gpus} GPU(s) (Gres={n.gres or 'none'}), expected {gpus}")
        if min_cpus is not None and n.cpus < min_cpus:
            problems.append(f"{n.name}: advertises {n.cpus} CPUs, the profile's jobs need {min_cpus}")
        if min_memory_mb is not None and n.real_memory_mb < min_memory_mb:
            problems.append(
                f"{n.name}: advertises RealMemory={n.real_memory_mb} MB, the profile's jobs need {min_memory_mb} MB"
            )
    return problems


def node_spread(known: list[NodeInfo]) -> list[str]:
    """Nodes whose CPUs, memory or GRES differ from most of their peers: a configuration drift
    worth a warning (a partition may be mixed on purpose, so it is not a failure)."""
    if len(known) < 2:
        return []
    shapes = Counter((n.cpus, n.real_memory_mb, n.gpus) for n in known)
    common, _ = shapes.most_common(1)[0]
    return [
        f"{n.name}: CPUs={n.cpus} RealMemory={n.real_memory_mb} MB GPUs={n.gpus}, most nodes have "
        f"CPUs={common[0]} RealMemory={common[1]} MB GPUs={common[2]}"
        for n in known
        if (n.cpus, n.real_memory_mb, n.gpus) != common
    ]


def accounting_problems() -> list[str]:
    """Empty when ``sacct`` answers (slurmdbd reachable): without accounting, job ends cannot be
    told apart and a job that dies without a result would be waited on until its time limit."""
    try:
        run(["sacct", "-X", "-n", "-P", "-S", "now-1hours", "-o", "JobID"])
    except SlurmQueryError as exc:
        return [f"{exc} Check slurmdbd and AccountingStorageType in slurm.conf."]
    return []


def queue_state(job_id: str) -> str | None:
    """The job's state as the queue sees it (``PENDING``, ``RUNNING``, ...), or None once the
    queue no longer lists it. Works without accounting, unlike sacct."""
    try:
        out = run(["squeue", "-h", "-j", job_id, "-o", "%T"])
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


# --------------------------------------------------------------------------- nodes under a job
# The launcher asks these while a job runs: Slurm notices a dead node only after SlurmdTimeout
# (300 s on many clusters), but marks it NOT_RESPONDING at its first failed ping.

_LOST = {"DOWN", "FAIL", "FAILING", "NOT_RESPONDING", "POWERED_DOWN", "POWERING_DOWN", "UNKNOWN"}


def lost_nodes(found: list[NodeInfo], names: tuple[str, ...]) -> dict[str, str]:
    """Of ``names``, the nodes in ``found`` that are down, failing or not responding (a job on
    them is lost even if Slurm still calls it RUNNING): name → ``"STATE (reason)"``. A node
    that Slurm no longer lists at all counts as lost too."""
    by_name = {n.name: n for n in found}
    out: dict[str, str] = {}
    for name in names:
        node = by_name.get(name)
        if node is None:
            out[name] = "not known to slurmctld"
        elif set(node.state.upper().split("+")) & _LOST:
            out[name] = node.state + (f" ({node.reason})" if node.reason else "")
    return out


DRAIN_REASON_CHARS = 240  # Slurm keeps the reason as one line; long ones only clutter sinfo -R


def drain_reason(check: str, evidence: str) -> str:
    """One line for Slurm's reason field: who drained the node, for which check, and why."""
    text = " ".join(f"pytest-gpucluster: {check}: {evidence}".split())
    return text if len(text) <= DRAIN_REASON_CHARS else text[: DRAIN_REASON_CHARS - 1] + "…"


def drain(node: str, reason: str) -> None:
    """``scontrol update nodename=NODE state=drain reason=...``; SlurmQueryError when refused.
    The reason travels as one argument: nothing goes through a shell."""
    run(["scontrol", "update", f"nodename={node}", "state=drain", f"reason={reason}"])

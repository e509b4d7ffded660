"""Xid errors on one node during the run and since boot: what the NVML watches of the run's GPU
jobs and the node's kernel log (``workloads.xid``) say, folded into one sentence per Xid and
judged by what the Xid asks of the operator.

An Xid that asks for a GPU reset, a node reboot or servicing fails the node when it occurred
during the run; any other Xid warns; an Xid logged since boot but before the run warns whatever
it is (the run did not cause it, but the customer must see it). The table (``XIDS``) gives each
Xid its meaning as NVIDIA's Xid catalog words it and its action: NVIDIA's catalog where it names
a reset, a reboot or servicing, and the Xids that the Azure HPC health checks fail a node on (48
56 57 58 62 63 64 65 68 69 73 74 79 80 81 92 119 120), which are taken as failing too; each row
says which. An Xid not in the table warns, named by its number.

``judge_node`` gives the findings that fail and warn, each of its GPU where the Xid names one
GPU, else of the node; and instead a finding that the node's Xids are not judged when neither
source could be read there: neither is ever taken for "no Xid".
"""

from __future__ import annotations

import datetime as _dt
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from pytest_gpucluster.verdict import Finding
from pytest_gpucluster.verdict.ranges import spans
from pytest_gpucluster.workloads.xid import KernelLog, XidWatch, pci_key

Source = Literal["NVIDIA", "Azure", "NVIDIA, Azure"]


@dataclass(frozen=True)
class XidKind:
    """What an Xid means and what it asks for; ``fails``: it needs a GPU reset, a node reboot or
    servicing; ``source``: where that judgement comes from."""

    meaning: str
    action: str
    fails: bool
    source: Source


RESET = "reset the GPU"
REBOOT = "reboot the node"
SERVICE = "have the GPU serviced"
APP = "the application it hit ended"  # NVIDIA: restart the application; the GPU keeps serving

# fmt: off
XIDS: dict[int, XidKind] = {
    8:   XidKind("GPU stopped processing", APP, False, "NVIDIA"),
    13:  XidKind("Graphics Engine Exception", APP, False, "NVIDIA"),
    31:  XidKind("GPU memory page fault", APP, False, "NVIDIA"),
    32:  XidKind("Invalid or corrupted push buffer stream", APP, False, "NVIDIA"),
    43:  XidKind("GPU stopped processing", APP, False, "NVIDIA"),
    45:  XidKind("Preemptive cleanup, due to previous errors", APP, False, "NVIDIA"),
    48:  XidKind("Double Bit ECC Error", RESET, True, "NVIDIA, Azure"),
    56:  XidKind("Display Engine error", RESET, True, "Azure"),
    57:  XidKind("Error programming video memory interface", SERVICE, True, "Azure"),
    58:  XidKind("Unstable video memory interface detected", SERVICE, True, "Azure"),
    62:  XidKind("Internal micro-controller halt", RESET, True, "NVIDIA, Azure"),
    63:  XidKind("ECC page retirement or row remapping recording event", RESET, True, "NVIDIA, Azure"),
    64:  XidKind("ECC page retirement or row remapper recording failure", SERVICE, True, "NVIDIA, Azure"),
    65:  XidKind("Video processor exception", RESET, True, "Azure"),
    68:  XidKind("NVDEC0 Exception", RESET, True, "Azure"),
    69:  XidKind("Graphics Engine class error", RESET, True, "Azure"),
    73:  XidKind("NVENC2 Error", RESET, True, "Azure"),
    74:  XidKind("NVLink Error", RESET, True, "NVIDIA, Azure"),
    79:  XidKind("GPU has fallen off the bus", REBOOT, True, "NVIDIA, Azure"),
    80:  XidKind("Corrupted data sent to GPU", REBOOT, True, "Azure"),
    81:  XidKind("VGA Subsystem Error", REBOOT, True, "Azure"),
    92:  XidKind("High single-bit ECC error rate", SERVICE, True, "Azure"),
    94:  XidKind("Contained ECC error", APP, False, "NVIDIA"),
    95:  XidKind("Uncontained ECC error", RESET, True, "NVIDIA"),
    109: XidKind("Context Switch Timeout Error", APP, False, "NVIDIA"),
    119: XidKind("GSP RPC Timeout", RESET, True, "NVIDIA, Azure"),
    120: XidKind("GSP Error", RESET, True, "NVIDIA, Azure"),
    140: XidKind("Unrecovered ECC Error", RESET, True, "NVIDIA"),
    143: XidKind("GPU Initialization Failure", RESET, True, "NVIDIA"),
    154: XidKind("GPU Recovery Action Changed", "do what the driver's recovery action says", True, "NVIDIA"),
}
# fmt: on

# Xid 154's line names the new recovery action; back to "None" it asks for nothing.
_RECOVERY_NONE = re.compile(r"to 0x0 \(None\)", re.IGNORECASE)


def kind_of(xid: int, detail: str = "") -> XidKind:
    """The table's row for ``xid`` (``detail``: the rest of its kernel-log line, where known); an
    Xid the table lacks warns."""
    kind = XIDS.get(xid)
    if kind is None:
        return XidKind("not in the suite's Xid table", "see NVIDIA's Xid catalog", False, "NVIDIA")
    if xid == 154 and _RECOVERY_NONE.search(detail):
        return XidKind("GPU Recovery Action Changed back to none", "none", False, "NVIDIA")
    return kind


# --------------------------------------------------------------------------- kernel-log lines

# "NVRM: Xid (PCI:0000:18:00): 79, pid=1234, name=python, GPU has fallen off the bus."; older
# drivers write the address without "PCI:".
_XID_LINE = re.compile(
    r"NVRM: Xid \((?:PCI:)?([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2})(?:\.\d)?\): (\d+),?\s*(.*)"
)
_DETAIL_NOISE = re.compile(r"^(?:pid=[^,]*,\s*)?(?:name=[^,]*,\s*)?")


@dataclass(frozen=True)
class XidLine:
    """A parsed kernel-log Xid line: the GPU's PCI address (``pci_key``), the Xid and the driver's
    own words after it (without pid and process name)."""

    bus: str
    xid: int
    detail: str


def parse_line(message: str) -> XidLine | None:
    """An ``NVRM: Xid`` kernel-log message as an ``XidLine``; None for any other line."""
    m = _XID_LINE.search(message)
    if m is None:
        return None
    bus, xid, rest = m.groups()
    return XidLine(pci_key(bus), int(xid), _DETAIL_NOISE.sub("", rest).strip())


# --------------------------------------------------------------------------- occurrences


@dataclass(frozen=True)
class Occurrence:
    """One Xid on one GPU at one moment, from one source (``nvml`` or ``kernel log``)."""

    gpu: str  # "gpu3", or "PCI 0000:18:00" where the GPU's index is unknown
    xid: int
    epoch: float
    source: str
    detail: str = ""


def _label(bus: str, index: int | None) -> str:
    return f"gpu{index}" if index is not None else f"PCI {bus}"


def kernel_occurrences(log: KernelLog) -> list[Occurrence]:
    """Every Xid line of a node's kernel log, its time turned into epoch seconds."""
    order = {bus: i for i, bus in enumerate(log.gpus)}
    out = []
    for since_boot, message in log.lines:
        line = parse_line(message)
        if line is not None:
            out.append(
                Occurrence(
                    _label(line.bus, order.get(line.bus)),
                    line.xid,
                    log.boot_epoch + since_boot,
                    "kernel log",
                    line.detail,
                )
            )
    return out


def nvml_occurrences(watches: Iterable[XidWatch], window_s: float = 2.0) -> list[Occurrence]:
    """The Xid events of a node's watches, one per GPU, Xid and moment: tasks that watch the same
    GPUs (a job of a task per GPU on a node without device cgroups, two jobs at once) each see
    every event, so events of one GPU and Xid less than ``window_s`` apart are one."""
    found = sorted(
        (
            Occurrence(_label(e.gpu.bus, e.gpu.index) if e.gpu else "an unnamed GPU", e.xid, e.epoch, "NVML")
            for w in watches
            for e in w.events
        ),
        key=lambda o: (o.gpu, o.xid, o.epoch),
    )
    out: list[Occurrence] = []
    for o in found:
        last = out[-1] if out else None
        if last is not None and (last.gpu, last.xid) == (o.gpu, o.xid) and o.epoch - last.epoch < window_s:
            continue
        out.append(o)
    return out


# --------------------------------------------------------------------------- folding


@dataclass(frozen=True)
class XidFinding:
    """One Xid on one node, over one or more GPUs, during the run or before it."""

    node: str
    xid: int
    gpus: tuple[str, ...]
    events: int
    during: bool
    sources: tuple[str, ...]
    last_epoch: float
    kind: XidKind

    @property
    def fails(self) -> bool:
        """Whether it fails the node: it occurred during the run and needs a reset, reboot or service."""
        return self.during and self.kind.fails

    @property
    def sentence(self) -> str:
        """``node1:gpu[0-3] Xid 48 (Double Bit ECC Error) during the run, on 4 GPUs, 5 events (NVML);
        reset the GPU``: culprit first, then what and when, then what it asks for."""
        where = f"{self.node}:{gpu_list(self.gpus)}"
        when = (
            "during the run" if self.during else f"logged since boot, before the run (last at {_iso(self.last_epoch)})"
        )
        count = f"on {len(self.gpus)} GPUs, {self.events} events" if len(self.gpus) > 1 else f"{self.events} event"
        if len(self.gpus) == 1 and self.events != 1:
            count += "s"
        sources = ", ".join(self.sources)
        return f"{where} Xid {self.xid} ({self.kind.meaning}) {when}, {count} ({sources}); {self.kind.action}"

    def finding(self) -> Finding:
        """The verdict's finding: a failure where it fails the node, else a warning; of its GPU
        where it names one GPU by index, else of the node."""
        return _on_gpus(self.node, self.gpus, self.sentence, "fail" if self.fails else "warn")


def _on_gpus(node: str, gpus: Sequence[str], text: str, severity: Literal["fail", "warn"]) -> Finding:
    """A finding of ``node``'s one GPU ``gpuN``; of the node for several, or one known only by address."""
    one = re.fullmatch(r"gpu(\d+)", gpus[0]) if len(gpus) == 1 else None
    return Finding.on_node(node, text, gpu=int(one.group(1)) if one else None, severity=severity)


def gpu_list(gpus: Sequence[str]) -> str:
    """``gpu3``; ``gpu[0-3,5]`` for several; GPUs known only by address are listed as they are."""
    indices = sorted(int(g[3:]) for g in gpus if re.fullmatch(r"gpu\d+", g))
    others = sorted(g for g in gpus if not re.fullmatch(r"gpu\d+", g))
    parts = []
    if len(indices) == 1:
        parts.append(f"gpu{indices[0]}")
    elif indices:
        parts.append(f"gpu[{','.join(spans(indices, dash='-'))}]")
    return ",".join([*parts, *others])


def _iso(epoch: float) -> str:
    return _dt.datetime.fromtimestamp(epoch, _dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def fold(node: str, occurrences: Iterable[Occurrence], run_started: float) -> list[XidFinding]:
    """One finding per Xid, detail class and before/during: the same Xid on several GPUs of the
    node is one sentence with the GPUs and the count. During the run, a GPU's count is the kernel
    log's where it has that Xid for that GPU (it misses nothing between jobs), else NVML's; an Xid
    only NVML saw (its lines gone from the ring buffer) still counts. Failing findings first."""
    groups: dict[tuple[int, bool, XidKind], dict[str, dict[str, list[float]]]] = {}
    for o in occurrences:
        during = o.epoch >= run_started
        if not during and o.source != "kernel log":
            continue
        group = groups.setdefault((o.xid, during, kind_of(o.xid, o.detail)), {})
        group.setdefault(o.gpu, {}).setdefault(o.source, []).append(o.epoch)
    out = []
    for (xid, during, kind), per_gpu in groups.items():
        events = 0
        sources: set[str] = set()
        last = 0.0
        for by_source in per_gpu.values():
            counted = by_source.get("kernel log") or by_source["NVML"]
            events += len(counted)
            sources |= set(by_source)
            last = max(last, *counted)
        out.append(XidFinding(node, xid, tuple(sorted(per_gpu)), events, during, tuple(sorted(sources)), last, kind))
    return sorted(out, key=lambda f: (not f.fails, not f.during, f.xid))


# --------------------------------------------------------------------------- judging a node


@dataclass(frozen=True)
class NodeXids:
    """A node's judgement: its findings (failures and warnings, or the one saying why it cannot
    be judged), the Xids they come from and what each source covered."""

    node: str
    found: list[Finding] = field(default_factory=list)
    xids: list[XidFinding] = field(default_factory=list)
    sources: dict[str, str] = field(default_factory=dict)  # source → what it covered, for the results


def _nvml_gaps(watches: Sequence[XidWatch]) -> str:
    """Why the node's watches watched nothing: their errors, folded with a count."""
    if not watches:
        return "no GPU job of the run ran a task there"
    errors: dict[str, int] = {}
    for w in watches:
        why = w.error or "watched no GPU"
        errors[why] = errors.get(why, 0) + 1
    return "; ".join(f"{why} ({n} task{'s' if n != 1 else ''})" for why, n in errors.items())


def judge_node(
    node: str,
    watches: Sequence[XidWatch],
    log: KernelLog | None,
    run_started: float,
    *,
    log_missing: str = "",
    expected_gpus: int = 0,
) -> NodeXids:
    """Judge ``node``'s Xids: ``watches`` are the NVML watches of the run's tasks on it, ``log``
    its kernel-log reading (None: ``log_missing`` says why there is none), ``run_started`` the
    run's start (epoch s), ``expected_gpus`` how many GPUs the node should have."""
    watched = [w for w in watches if w.gpus]
    readable = log is not None and log.readable
    log_why = log.why if log is not None else (log_missing or "not read")
    if not readable and not watched:
        why = f"{node}: Xids not judged: kernel log not readable ({log_why}) and no NVML watch ({_nvml_gaps(watches)})"
        return NodeXids(node, [Finding.on_node(node, why, severity="not_judged")])
    occurrences = nvml_occurrences(watched)
    sources: dict[str, str] = {}
    if readable and log is not None:
        occurrences += kernel_occurrences(log)
        sources["kernel log"] = f"{len(log.lines)} Xid line(s) since boot"
    else:
        sources["kernel log"] = f"not readable: {log_why}"
    seen = sorted({_label(g.bus, g.index) for w in watched for g in w.gpus}, key=gpu_order)
    jobs = sorted({w.job_id for w in watched})
    named = f": {', '.join(jobs)}" if len(jobs) <= 5 else ""
    sources["NVML"] = f"{gpu_list(seen)} watched in {len(jobs)} job(s){named}" if watched else _nvml_gaps(watches)
    xids = fold(node, occurrences, run_started)
    found = [x.finding() for x in xids] + _coverage(node, log, readable, watched, seen, expected_gpus)
    return NodeXids(node, found, xids, sources)


def gpu_order(label: str) -> tuple[int, str]:
    """``gpu2`` before ``gpu10``; any other label (a CPU rank's ``cpu0``) after them, by name."""
    return (int(label[3:]), "") if re.fullmatch(r"gpu\d+", label) else (1 << 30, label)


def _coverage(
    node: str,
    log: KernelLog | None,
    readable: bool,
    watched: Sequence[XidWatch],
    seen: Sequence[str],
    expected_gpus: int,
) -> list[Finding]:
    """Warnings of what the sources left unwatched, where the kernel log cannot stand in for it."""
    out = []
    if log is not None and readable and (log.truncated or log.overwritten):
        text = f"{node}: kernel log read in part (records overwritten or the read's time bound reached)"
        out.append(Finding.on_node(node, text, severity="warn"))
    if readable:
        return out
    count = len(log.gpus) if log is not None and log.gpus else expected_gpus
    missing = [f"gpu{i}" for i in range(count) if f"gpu{i}" not in seen]
    if missing:
        text = (
            f"{node}:{gpu_list(missing)} not watched for Xids: no task of the run opened it through NVML "
            "and the kernel log is not readable"
        )
        out.append(_on_gpus(node, missing, text, "warn"))
    notes = sorted({n for w in watched for n in w.notes})
    if notes:
        out.append(Finding.on_node(node, f"{node}: NVML watch incomplete: {'; '.join(notes)}", severity="warn"))
    return out

"""The host's memory bandwidth per NUMA node and the node's clock, judged on the login node from
every node's ``HostReport`` (``workloads.host_checks``); docs/checks-node-config.md.

Memory: each NUMA node's Add-kernel rate against ``host.memory_bandwidth`` (a line for a whole
NUMA node, so only where the task held every CPU of it; a site sets it or calibrates it, and an
unset line is a warning to set it), and against its peers, the NUMA nodes measured with as many
CPUs on every tested node: under ``host.memory_fraction_of_median`` of their median is that
node's own fault (a missing or slower DIMM, a channel down, memory on the far socket).

Clock: not synchronized by any time daemon is a setting of the node (a warning: it drifts; it is
not yet wrong). The offsets are measured from the job's first node; each node's distance from
the median of all the nodes' clocks (the first at 0) is judged against ``host.clock_offset``, so
the first node's own wrong clock falls on it, not on every other node; with two nodes a
difference (judged as it is, not halved) is named on both, since nothing tells which clock is
wrong.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping

from pytest_gpucluster.checks import lines
from pytest_gpucluster.checks.node_config import setting
from pytest_gpucluster.checks.storage import Judged
from pytest_gpucluster.config import ThresholdSet
from pytest_gpucluster.config.node_config import NodeConfig
from pytest_gpucluster.verdict import Finding, Measurement, judge
from pytest_gpucluster.workloads.host_checks import ClockReading, HostReport, NumaBandwidth

BANDWIDTH = "host.memory_bandwidth"
FRACTION = "host.memory_fraction_of_median"
OFFSET = "host.clock_offset"
GUIDE = "docs/checks-node-config.md says how to set it"


def _where(n: NumaBandwidth) -> str:
    return f"NUMA node {n.numa_node}, {n.cpus} of {n.cpus_total} CPUs"


def memory(reports: Mapping[str, HostReport], node: str, thresholds: ThresholdSet, job_id: str = "") -> Judged:
    """``node``'s NUMA nodes: each against the line where the task held all its CPUs, and each
    against the median of the NUMA nodes measured with as many CPUs (the others of this node too)."""
    mine = reports[node]
    if mine.memory_error:
        why = f"{node}: host memory bandwidth not measured: {mine.memory_error}"
        return Judged(findings=(Finding.on_node(node, why, severity="not_judged"),))
    if not mine.memory:  # the task held no CPU the kernel places on a NUMA node
        why = f"{node}: host memory bandwidth not measured: none of the task's {mine.cpus_held} CPUs is on a NUMA node"
        return Judged(findings=(Finding.on_node(node, why, severity="not_judged"),))
    verdicts, unjudged, findings = [], [], []
    line = thresholds.get(BANDWIDTH)
    for n in mine.memory:
        m = Measurement.at(BANDWIDTH, n.gb_s, "GB/s", node, detail=_where(n), job_id=job_id)
        if n.cpus < n.cpus_total:
            unjudged.append(m)
            findings.append(_part_of_numa(node, n))
        elif line is None:
            unjudged.append(m)
        else:
            verdict = judge(m, line)
            verdicts.append(verdict)
            if verdict.status in ("fail", "warn") and (f := verdict.finding()) is not None:
                findings.append(f)
    if line is None and any(n.cpus == n.cpus_total for n in mine.memory):
        findings.append(lines.missing_line(thresholds, BANDWIDTH, [node], GUIDE))
    peers = _peers(reports, node, thresholds, job_id)
    return Judged(tuple(verdicts), tuple(unjudged), tuple(findings)) + peers


def _part_of_numa(node: str, n: NumaBandwidth) -> Finding:
    text = (
        f"{node}: host memory bandwidth of NUMA node {n.numa_node} measured with {n.cpus} of its {n.cpus_total} "
        f"CPUs ({n.gb_s:.4g} GB/s), the CPUs the job's task held: not the NUMA node's bandwidth, so "
        f"{BANDWIDTH} does not judge it. Give the job the node's CPUs (the profile's cpus_per_task) to judge it"
    )
    return Finding.outside("config", text, nodes=[node], setting="cpus_per_task", severity="warn")


def _peers(reports: Mapping[str, HostReport], node: str, thresholds: ThresholdSet, job_id: str) -> Judged:
    """``node``'s NUMA nodes against the median of every other NUMA node measured with as many
    CPUs, on any tested node; none to compare with: nothing judged."""
    line = thresholds.get(FRACTION)
    verdicts, unjudged, findings = [], [], []
    for n in reports[node].memory:
        others = [
            o.gb_s
            for r in reports.values()
            for o in r.memory
            if o.cpus == n.cpus and (r.node, o.numa_node) != (node, n.numa_node)
        ]
        if not others:
            continue
        median = statistics.median(others)
        if median <= 0:
            continue
        detail = f"{_where(n)}, {n.gb_s:.4g} GB/s against the median {median:.4g} GB/s of {len(others)} peer(s)"
        m = Measurement.at(FRACTION, n.gb_s / median, "ratio", node, detail=detail, job_id=job_id)
        if line is None:
            unjudged.append(m)
            continue
        verdict = judge(m, line)
        verdicts.append(verdict)
        if verdict.status in ("fail", "warn"):
            text = (
                f"{node}: host memory of NUMA node {n.numa_node} moves {n.gb_s:.4g} GB/s, {n.gb_s / median:.2f} of "
                f"the median {median:.4g} GB/s of the NUMA nodes measured with {n.cpus} CPUs ({line.describe()}; "
                f"{line.evidence or line.source}): a missing or slower DIMM, a memory channel down, or memory "
                "placed on the other socket"
            )
            findings.append(
                Finding.on_node(
                    node,
                    text,
                    severity=verdict.status,
                    metric=FRACTION,
                    value=n.gb_s / median,
                    unit="ratio",
                    job_id=job_id,
                )
            )
    if line is None and unjudged:
        findings.append(lines.missing_line(thresholds, FRACTION, [node], GUIDE))
    return Judged(tuple(verdicts), tuple(unjudged), tuple(findings))


def synchronized(report: HostReport, cfg: NodeConfig) -> tuple[Finding, ...] | None:
    """The kernel's clock discipline: a warning where no time daemon keeps it synchronized; None
    where there is nothing to judge (the kernel's state unreadable, or the profile does not ask
    for it: ``node_config.clock_synced = false``)."""
    clock = report.clock
    if clock is None or clock.synced is None or not cfg.clock_synced:
        return None
    if clock.synced:
        return ()
    daemons = ", ".join(clock.daemons) or "no time daemon running"
    found = f"not synchronized (the kernel reports STA_UNSYNC; {daemons})"
    text = (
        f"{report.node}: the clock is {found}, expected synchronized (node_config.clock_synced): a free-running "
        "clock drifts by seconds a day, and the logs, traces and checkpoints of one job from several nodes stop "
        "lining up"
    )
    remedy = clock_remedy(clock, "the kernel reports the clock unsynchronized")
    found_it = setting(
        report.node,
        "clock synchronization",
        text,
        found=found,
        expected="synchronized",
        remedy=remedy,
        severity="warn",
    )
    return (found_it,)


def offsets(reports: Mapping[str, HostReport]) -> dict[str, float]:
    """node → its clock's distance (ms) from the median of all the nodes' clocks, the job's first
    node at 0 (of two nodes, from the other's); only the nodes whose offset was measured (and
    that first node)."""
    measured: dict[str, float] = {}
    for node, r in reports.items():
        c = r.clock
        if c is None:
            continue
        if c.offset_ms is not None:
            measured[node] = c.offset_ms
        elif c.reference == node and not c.error:
            measured[node] = 0.0
    if len(measured) < 2:
        return {}
    if len(measured) == 2:  # no majority: each is as far from the other as the other from it
        (a, va), (b, vb) = measured.items()
        return {a: va - vb, b: vb - va}
    centre = statistics.median(measured.values())
    return {n: v - centre for n, v in measured.items()}


def clock_offset(reports: Mapping[str, HostReport], node: str, thresholds: ThresholdSet, job_id: str = "") -> Judged:
    """``node``'s clock against the median of the nodes' clocks (``offsets``), by ``host.clock_offset``."""
    clock = reports[node].clock
    if clock is not None and clock.error:
        return Judged(
            findings=(
                Finding.on_node(node, f"{node}: clock offset not measured: {clock.error}", severity="not_judged"),
            )
        )
    apart = offsets(reports)
    if node not in apart:
        return Judged()
    against = "the other node's clock" if len(apart) == 2 else f"the median of {len(apart)} nodes' clocks"
    detail = f"from {against}, measured against {clock.reference if clock else '?'}"
    if clock is not None and clock.round_trip_ms is not None:
        detail += f" (± {clock.round_trip_ms / 2:.3g} ms)"
    m = Measurement.at(OFFSET, abs(apart[node]), "ms", node, detail=detail, job_id=job_id)
    line = thresholds.get(OFFSET)
    if line is None:
        return Judged(unjudged=(m,), findings=(lines.missing_line(thresholds, OFFSET, [node], GUIDE),))
    verdict = judge(m, line)
    if verdict.status not in ("fail", "warn"):
        return Judged((verdict,))
    said = ", ".join(f"{n} {apart[n]:+.4g} ms" for n in sorted(apart))
    bound = line.warn_above if line.warn_above is not None else line.fail_above
    expected = f"within {bound:g} ms ({OFFSET}: {line.describe()})" if bound is not None else line.describe()
    if len(apart) == 2:
        each = {n: clock_remedy(reports[n].clock) for n in sorted(apart)}
        remedy = (
            next(iter(each.values()))
            if len(set(each.values())) == 1
            else "; ".join(f"{n}: {r}" for n, r in each.items())
        )
        text = (
            f"the clocks of {' and '.join(sorted(apart))} differ by {abs(apart[node]):.4g} ms ({line.describe()}; "
            f"{line.evidence or line.source}); with two nodes nothing tells which clock is wrong. To change, on "
            f"both: {remedy}"
        )
        found = Finding.across(
            sorted(apart),
            text,
            severity=verdict.status,
            setting="clock offset",
            found=f"{abs(apart[node]):.4g} ms apart",
            expected=expected,
            remedy=remedy,
        )
    else:
        text = (
            f"{node}: clock {apart[node]:+.4g} ms from the median of the nodes' clocks ({said}; {line.describe()}; "
            f"{line.evidence or line.source})"
        )
        found = setting(
            node,
            "clock offset",
            text,
            found=f"{apart[node]:+.4g} ms from the median of {len(apart)} nodes' clocks",
            expected=expected,
            remedy=clock_remedy(clock),
            severity=verdict.status,
            metric=OFFSET,
            value=abs(apart[node]),
            unit="ms",
            job_id=job_id,
        )
    return Judged((verdict,), findings=(found,))


# What to look at where each time daemon runs, in the order a node's daemons are named.
_DAEMON_CHECKS = {
    "chronyd": "`chronyc tracking` shows the offset chronyd keeps and `chronyc sources` whether it reaches its "
    "servers; `chronyc makestep` steps the clock at once",
    "ntpd": "`ntpq -p` shows whether ntpd reaches its servers and its offset from them",
    "openntpd": "`ntpctl -s all` shows whether ntpd reaches its servers and its offset from them",
    "systemd-timesyncd": "`timedatectl timesync-status` shows the server systemd-timesyncd reached and its "
    "offset (an SNTP client: chrony keeps clocks closer)",
    "ptp4l": "`pmc -u -b 0 'GET CURRENT_DATA_SET'` shows ptp4l's offset from the grandmaster",
    "phc2sys": "phc2sys carries the NIC's PTP clock to the system clock: it runs against the interface ptp4l uses",
    "timemaster": "`chronyc sources` shows the PTP and NTP sources timemaster gave chronyd",
}


def clock_remedy(
    clock: ClockReading | None, fault: str = "does not keep the clock in step with the other nodes'"
) -> str:
    """How to bring the node's clock in step, by the time daemons it runs (``fault``: what the
    running daemon fails to do): what to look at for each, and that every node uses the same
    servers; with none running, to run one."""
    if clock is None:
        return "run chrony (or the site's time daemon) against the site's time servers, the same on every node"
    if not clock.daemons:
        return (
            "no time daemon runs: run chrony against the site's time servers, the same on every node "
            "(systemctl enable --now chronyd)"
        )
    said = [_DAEMON_CHECKS[d] for d in clock.daemons if d in _DAEMON_CHECKS]
    names = " and ".join(clock.daemons)
    return (
        f"{names} {'runs' if len(clock.daemons) == 1 else 'run'} but {fault}: "
        + "; ".join(said or ["check that it reaches the site's time servers"])
        + "; every node should name the same time servers (or the same PTP domain)"
    )

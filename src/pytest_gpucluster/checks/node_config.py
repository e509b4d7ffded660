"""The node's configuration, judged on the login node: what ``workloads.node_settings`` read on
every node against the profile's ``[node_config]`` (config/node_config.py), the suite's lines, or
the majority of the tested nodes. Each deviation is a ``Finding.of_setting`` naming the setting,
the value found, the value expected with where that comes from, and how to change it; a setting
the node has nothing of is ``Judged.not_applicable`` with the reason. The GPU and PCIe settings
are in ``checks.node_gpu_config``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from pytest_gpucluster.config.node_config import RDMA_MEMLOCK_BYTES, NodeConfig
from pytest_gpucluster.verdict import Finding, Severity
from pytest_gpucluster.workloads import net_settings
from pytest_gpucluster.workloads.node_settings import NodeSettings

MAJORITY = "the majority of the tested nodes"


@dataclass(frozen=True)
class Judged:
    """One setting of one node judged: its findings, or why there was nothing to measure."""

    findings: tuple[Finding, ...] = ()
    not_applicable: str = ""


def setting(node: str, name: str, text: str, *, remedy: str, **fields: Any) -> Finding:
    """``Finding.of_setting`` whose sentence ends with how to change the setting, for the person
    reading the report (the fields keep each part apart for the results)."""
    return Finding.of_setting(node, name, f"{text}. To change: {remedy}", remedy=remedy, **fields)


def size(value: int | None) -> str:
    """A byte count as a person reads it, to four digits: ``64 KiB``, ``16 GiB``, ``unlimited``
    for None."""
    if value is None:
        return "unlimited"
    for unit, scale in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if value >= scale:
            return f"{value / scale:.4g} {unit}"
    return f"{value} bytes"


def _unlimited_last(value: int | None) -> float:
    return float("inf") if value is None else float(value)


def majority_limit(values: Iterable[int | None]) -> int | None:
    """The most common limit (None: unlimited); among equally common ones the largest, since a
    limit is lowered by a fault far more often than raised."""
    counts = Counter(values)
    top = max(counts.values(), default=0)
    return max((v for v, c in counts.items() if c == top), key=_unlimited_last, default=None)


def _below(value: int | None, line: int | None) -> bool:
    return value is not None and (line is None or value < line)


def rdma_in_use(s: NodeSettings, ib_hcas: int) -> bool:
    """Whether the node's jobs use RDMA: the profile expects HCAs, or the node has RDMA devices."""
    return ib_hcas > 0 or bool(s.rdma_devices)


@dataclass(frozen=True)
class _Line:
    """The line a limit is judged by, where it comes from, and how bad falling below it is."""

    value: int | None  # None: unlimited
    source: str
    severity: Severity


def _limit_line(
    all_nodes: Mapping[str, NodeSettings], key: str, own: int | None, own_key: str, suite: int | None
) -> _Line:
    if own is not None:
        return _Line(own, f"the profile's node_config.{own_key}", "fail")
    if suite is not None:
        return _Line(suite, "RDMA registers memory (the AWS health checks' line)", "fail")
    peers = [n.limits[key].soft for n in all_nodes.values() if key in n.limits]
    return _Line(majority_limit(peers), MAJORITY, "warn")


# limit → (its name, how its values read, why it matters, the systemd key that raises slurmd's own)
_LIMITS = {
    "memlock": (
        "RLIMIT_MEMLOCK",
        size,
        "RDMA memory registration (NCCL's InfiniBand transport, GPUDirect) fails once it is used up",
        "LimitMEMLOCK=infinity",
    ),
    "nofile": (
        "RLIMIT_NOFILE",
        lambda v: "unlimited" if v is None else str(v),
        "a job of many ranks or data-loader workers runs out of file descriptors (sockets, shared memory, files)",
        "LimitNOFILE=131072",
    ),
}


def limits(all_nodes: Mapping[str, NodeSettings], node: str, cfg: NodeConfig, *, ib_hcas: int) -> Judged:
    """The task's RLIMIT_MEMLOCK and RLIMIT_NOFILE (the soft limit: what the job gets): at least
    the profile's line; else, for memlock where RDMA is in use, 16 GiB; else the majority's (a
    warning, nothing of the run needing more)."""
    s = all_nodes[node]
    if not s.limits:  # an unreadable /proc/self/limits is no answer about the node: not judged
        text = f"{node}: the task's limits could not be read ({'; '.join(s.errors) or 'no limits row'})"
        return Judged((Finding.on_node(node, text, severity="not_judged"),))
    rdma = RDMA_MEMLOCK_BYTES if rdma_in_use(s, ib_hcas) else None
    lines = {
        "memlock": _limit_line(all_nodes, "memlock", cfg.memlock_min, "memlock_min", rdma),
        "nofile": _limit_line(all_nodes, "nofile", cfg.nofile_min, "nofile_min", None),
    }
    out: list[Finding] = []
    for key, line in lines.items():
        limit = s.limits.get(key)
        if limit is None or not _below(limit.soft, line.value):
            continue
        name, show, why, unit_key = _LIMITS[key]
        at_least = f"{show(line.value)} or more" if line.value is not None else "unlimited"
        expected = f"{at_least} ({line.source})"
        text = f"{node}: {name} of a Slurm task is {show(limit.soft)}, expected {expected}: {why}"
        remedy = (
            f"raise slurmd's own limit ({unit_key} in its systemd unit) and add {key.upper()} to "
            "PropagateResourceLimitsExcept in slurm.conf, so the submitting shell's limit is not carried in; "
            "/etc/security/limits.conf covers logins, not Slurm tasks"
        )
        out.append(
            setting(node, name, text, found=show(limit.soft), expected=expected, remedy=remedy, severity=line.severity)
        )
    return Judged(tuple(out))


def swap(s: NodeSettings, cfg: NodeConfig) -> Judged:
    """SwapTotal of the node: 0 unless the profile allows swap (a warning, as AzHPC's checks)."""
    if s.swap_total_bytes is None:
        return Judged(not_applicable=f"{s.node}: /proc/meminfo has no SwapTotal (a kernel without swap support)")
    if s.swap_total_bytes == 0 or cfg.swap_allowed:
        return Judged()
    found = size(s.swap_total_bytes)
    text = (
        f"{s.node}: {found} of swap configured, expected none (node_config.swap_allowed = false): a node "
        "that swaps under memory pressure slows every rank of its job instead of failing at once"
    )
    remedy = "swapoff -a, and remove the swap entries from /etc/fstab (or mask the swap units)"
    return Judged((setting(s.node, "swap", text, found=found, expected="0", remedy=remedy, severity="warn"),))


def governor(s: NodeSettings, cfg: NodeConfig) -> Judged:
    """Every CPU's cpufreq governor is the profile's (``performance``); a warning otherwise."""
    if not s.governors:
        return Judged(
            not_applicable=f"{s.node}: no cpufreq governor to read (a virtual machine, or the firmware sets "
            "the CPU frequency)"
        )
    others = {g: n for g, n in s.governors.items() if g != cfg.governor}
    if not others:
        return Judged()
    found = ", ".join(f"{g} on {n} CPU(s)" for g, n in sorted(others.items()))
    text = (
        f"{s.node}: CPU frequency governor {found}, expected {cfg.governor!r} (node_config.governor): a "
        "CPU that raises its clock only after the load arrives makes the host side of every step (kernel "
        "launches, data loading) slower and uneven across nodes"
    )
    remedy = f"cpupower frequency-set -g {cfg.governor}, kept across reboots (a tuned profile or a unit)"
    finding = setting(s.node, "cpu governor", text, found=found, expected=cfg.governor, remedy=remedy, severity="warn")
    return Judged((finding,))


def _matches(name: str, patterns: Iterable[str]) -> bool:
    return any(name == p[1:] if p.startswith("=") else name.startswith(p) for p in patterns)


def nccl_interfaces(s: NodeSettings, cfg: NodeConfig, env: Mapping[str, str]) -> tuple[str, str]:
    """The names of the node's interfaces NCCL uses, and where that choice comes from:
    node_config.nccl_interfaces, else the profile's NCCL_SOCKET_IFNAME (its ``^`` exclusion and
    ``=`` exact forms as NCCL reads them), else the IPoIB interfaces."""
    names = [i.name for i in s.interfaces]
    if cfg.nccl_interfaces:
        return ",".join(n for n in names if _matches(n, cfg.nccl_interfaces)), "node_config.nccl_interfaces"
    spec = env.get("NCCL_SOCKET_IFNAME", "").strip()
    if spec:
        exclude = spec.startswith("^")
        patterns = [p for p in spec.lstrip("^").split(",") if p]
        chosen = [n for n in names if _matches(n, patterns) != exclude]
        return ",".join(chosen), "the profile's NCCL_SOCKET_IFNAME"
    return ",".join(i.name for i in s.interfaces if i.infiniband), "the IPoIB interfaces"


def roce_interfaces(s: NodeSettings, env: Mapping[str, str]) -> dict[str, str]:
    """The node's RoCE interfaces (the network devices of RDMA ports whose link layer is
    Ethernet) NCCL's RDMA transport may use, each with where that comes from: all of them, or
    those of the HCAs the profile's NCCL_IB_HCA selects."""
    roce = [i for i in s.interfaces if i.roce]
    spec = env.get("NCCL_IB_HCA", "").strip()
    if spec:
        kept = set(net_settings.selects(spec, sorted({i.rdma_port.split()[0] for i in roce})))
        roce = [i for i in roce if i.rdma_port.split()[0] in kept]
    return {i.name: f"the RoCE interface of {i.rdma_port}" for i in roce}


def mtu_interfaces(s: NodeSettings, cfg: NodeConfig, env: Mapping[str, str]) -> dict[str, str]:
    """Every interface of the node whose MTU the collectives depend on, with why: those NCCL's
    sockets use (``nccl_interfaces``) and the RoCE interfaces its RDMA transport uses."""
    chosen, source = nccl_interfaces(s, cfg, env)
    named = {name: source for name in chosen.split(",") if name}
    return {**named, **roce_interfaces(s, env)}


_MTU_WHY = {
    False: "frames larger than a peer's MTU are dropped, so NCCL's connections stall or fall back",
    True: "RoCE takes its path MTU from this interface's MTU, so the node's RDMA traffic goes in smaller "
    "packets than its peers', or is dropped where a switch port is set for a smaller MTU",
}


def _mtu_remedy(name: str, line: int | str, roce: bool) -> str:
    remedy = f"ip link set dev {name} mtu {line}, and in the interface's persistent configuration"
    if roce:
        remedy += "; the switch ports the interface is cabled to carry the same MTU"
    return remedy


def mtu(all_nodes: Mapping[str, NodeSettings], cfg: NodeConfig, env: Mapping[str, str]) -> Judged:
    """The MTU of each interface the collectives depend on (``mtu_interfaces``), alike on every
    node (the profile's, else the majority's); where no majority exists the nodes are named
    together, none convicted, and the profile is asked for the MTU."""
    per_name: dict[str, dict[str, int]] = {}
    sources: dict[str, str] = {}
    roce: set[str] = set()
    for node, s in all_nodes.items():
        chosen = mtu_interfaces(s, cfg, env)
        for i in s.interfaces:
            if i.name in chosen:
                per_name.setdefault(i.name, {})[node] = i.mtu
                sources.setdefault(i.name, chosen[i.name])
                if i.roce:
                    roce.add(i.name)
    if not per_name:
        return Judged(
            not_applicable="no interface to compare: no IPoIB or RoCE interface on the nodes, and neither "
            "node_config.nccl_interfaces nor the profile's NCCL_SOCKET_IFNAME names one"
        )
    out: list[Finding] = []
    for name, values in sorted(per_name.items()):
        source, why = sources[name], _MTU_WHY[name in roce]
        line = cfg.mtu
        origin = "node_config.mtu"
        if line is None:
            counts = Counter(values.values())
            top = max(counts.values())
            if len(values) > 1 and list(counts.values()).count(top) > 1:
                found = ", ".join(f"{n} {m}" for n, m in sorted(values.items()))
                expected = "one MTU on every node (no majority: the profile's node_config.mtu, unset)"
                remedy = (
                    "state the MTU the fabric is built for in the profile's node_config.mtu; on the nodes off it, "
                    + _mtu_remedy(name, "MTU", name in roce)
                )
                text = (
                    f"{name} ({source}): MTU differs between the nodes with no majority: {found}: {why}. "
                    f"To change: {remedy}"
                )
                out.append(
                    Finding.across(
                        values, text, setting=f"MTU of {name}", found=found, expected=expected, remedy=remedy
                    )
                )
                continue
            line, origin = counts.most_common(1)[0][0], MAJORITY
        for node, value in sorted(values.items()):
            if value != line:
                text = f"{node}: MTU of {name} ({source}) is {value}, expected {line} ({origin}): {why}"
                remedy = _mtu_remedy(name, line, name in roce)
                out.append(
                    setting(
                        node, f"MTU of {name}", text, found=str(value), expected=f"{line} ({origin})", remedy=remedy
                    )
                )
    return Judged(tuple(out))

"""The results' inventory as people read it: a row per node (past ``max_rows`` nodes, a row per
group of nodes whose compared facts agree, named by hostlist) with the GPUs, driver and CUDA,
NVLink, InfiniBand, kernel, RAM and CPUs in words, and the rest folded beneath it. Pure: plain
dicts in, strings out; nothing is ever shown as a Python literal (``plain``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pytest_gpucluster.verdict import hostlist

COLUMNS = ("GPUs", "driver / CUDA", "NVLink", "InfiniBand", "kernel", "RAM", "CPUs")
NA = ("", "n/a", None)
# Summary facts the columns already show; the others go under the row's details.
_SHOWN = {
    "gpu_model",
    "gpu_count",
    "gpu_memory_mib",
    "mig_mode",
    "driver",
    "cuda",
    "gpu_interconnect",
    "ib_devices",
    "ib_active_ports",
    "ib_firmware",
    "kernel",
    "os",
    "memory_gib",
    "numa_nodes",
    "logical_cpus",
    "cpu_model",
    "cpu_topology",
}


def plain(value: Any) -> str:
    """Any JSON value as words: a mapping as ``key: value, ...``, a list as ``a, b``, a number
    as itself; never a Python literal."""
    if isinstance(value, Mapping):
        return "; ".join(f"{k}: {plain(v)}" for k, v in value.items())
    if isinstance(value, list | tuple | set):
        return ", ".join(plain(v) for v in value)
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:g}"
    return "" if value is None else str(value)


@dataclass(frozen=True)
class Detail:
    """One folded section of a row: a line of text, or a small table (a list of records)."""

    title: str
    text: str = ""
    columns: tuple[str, ...] = ()
    rows: tuple[tuple[str, ...], ...] = ()


@dataclass(frozen=True)
class Row:
    """One node, or one group of nodes alike."""

    label: str
    cells: tuple[str, ...]  # in COLUMNS order
    details: tuple[Detail, ...]


def _has(value: Any) -> bool:
    return value not in NA


def _cells(s: Mapping[str, Any]) -> tuple[str, ...]:
    gpus = "none"
    if s.get("gpu_count"):
        gpus = f"{s['gpu_count']} × {plain(s.get('gpu_model', 'GPU'))}"
        mib = s.get("gpu_memory_mib")
        if isinstance(mib, int | float):
            gpus += f", {mib / 1024:.0f} GiB each"
        if _has(s.get("mig_mode")) and str(s.get("mig_mode")) != "disabled":
            gpus += f"; MIG {plain(s['mig_mode'])}"
    elif "gpu_count" not in s:
        gpus = "—"
    driver = " / ".join(x for x in (plain(s.get("driver")) if _has(s.get("driver")) else "", _cuda(s.get("cuda"))) if x)
    links = str(s.get("gpu_interconnect") or "")
    nvlink = (
        ", ".join(
            f"{label} on {n} GPU pair{'s' if n != '1' else ''}"
            for label, _, n in (p.partition("×") for p in links.split(", "))
        )
        if _has(links) and "×" in links
        else plain(links) or "—"
    )
    ib = "—"
    if "ib_devices" in s:
        devices = int(s.get("ib_devices") or 0)
        ib = "none"
        if devices:
            ib = f"{devices} HCA{'s' if devices != 1 else ''}, {s.get('ib_active_ports', 0)} port(s) active"
            if _has(s.get("ib_firmware")):
                ib += f", firmware {plain(s['ib_firmware'])}"
    kernel = plain(s.get("kernel")) if _has(s.get("kernel")) else "—"
    if _has(s.get("os")):
        kernel = f"{kernel} ({plain(s['os'])})" if kernel != "—" else plain(s["os"])
    ram = f"{float(s['memory_gib']):.0f} GiB" if isinstance(s.get("memory_gib"), int | float) else "—"
    if ram != "—" and isinstance(s.get("numa_nodes"), int):
        ram += f", {s['numa_nodes']} NUMA node{'s' if s['numa_nodes'] != 1 else ''}"
    cpus = "—"
    if s.get("logical_cpus"):
        cpus = f"{s['logical_cpus']} × {plain(s.get('cpu_model', 'CPU'))}"
        if _has(s.get("cpu_topology")):
            cpus += f" (sockets × cores × threads {str(s['cpu_topology']).replace('x', ' × ')})"
    return (gpus, driver or "—", nvlink, ib, kernel, ram, cpus)


def _cuda(value: Any) -> str:
    return f"CUDA {plain(value)}" if _has(value) else ""


def _detail(title: str, value: Any) -> Detail:
    """A section of the details: a list of records as a table, anything else as one line."""
    if isinstance(value, list) and value and all(isinstance(v, Mapping) for v in value):
        columns: list[str] = []
        for record in value:
            columns += [str(k) for k in record if str(k) not in columns]
        rows = tuple(tuple(plain(record.get(c, "")) for c in columns) for record in value)
        return Detail(title, columns=tuple(columns), rows=rows)
    return Detail(title, text=plain(value) or "none")


def _details(facts: Mapping[str, Any], summary: Mapping[str, Any]) -> tuple[Detail, ...]:
    others = {k: v for k, v in summary.items() if k not in _SHOWN}
    out = [Detail("other facts", text=plain(others))] if others else []
    out += [_detail(str(k), v) for k, v in facts.items() if k != "summary"]
    return tuple(out)


def inventory_rows(inventory: Any, max_rows: int = 16) -> tuple[list[Row], str]:
    """The rows and a note. Up to ``max_rows`` nodes, a row per node with every detail section
    folded beneath it; past that, a row per group of nodes whose compared facts (``summary``)
    agree, largest group first, with those facts only: per-node details (serials, UUIDs) stay in
    the results file."""
    if not isinstance(inventory, Mapping) or not inventory:
        return [], ""
    facts_of = {str(n): f for n, f in inventory.items() if isinstance(f, Mapping)}

    def summary_of(facts: Mapping[str, Any]) -> Mapping[str, Any]:
        s = facts.get("summary", facts)
        return s if isinstance(s, Mapping) else {}

    if len(facts_of) <= max_rows:
        rows = [Row(node, _cells(summary_of(f)), _details(f, summary_of(f))) for node, f in facts_of.items()]
        return rows, ""
    groups: dict[str, list[str]] = {}
    summaries: dict[str, Mapping[str, Any]] = {}
    for node, facts in facts_of.items():
        key = json.dumps(summary_of(facts), sort_keys=True, default=str)
        groups.setdefault(key, []).append(node)
        summaries[key] = summary_of(facts)
    ordered = sorted(groups, key=lambda k: -len(groups[k]))
    rows = [
        Row(f"{hostlist(groups[k])} ({len(groups[k])})", _cells(summaries[k]), _details({}, summaries[k]))
        for k in ordered
    ]
    note = (
        f"{len(facts_of)} nodes in {len(groups)} group(s) whose compared facts agree; "
        "per-node details (serials, UUIDs, PCI addresses) are in the results file."
    )
    return rows, note


def differing(rows: Sequence[Row]) -> set[int]:
    """The columns whose value is not the same in every row (shown marked)."""
    return {i for i in range(len(COLUMNS)) if len({r.cells[i] for r in rows}) > 1}

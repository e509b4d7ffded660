"""Fabric error counters before and after the run's traffic: which rose, which vanished.

``compare`` takes two ``FabricSnapshot`` of one node (before the first workload, after the last
NCCL or training job) and per-counter bounds (counter → largest increase allowed, 0 where not
named) and returns one ``FabricFinding`` per thing to say, each with its sentence:

- ``increase``: a counter rose by more than its bound (fails);
- ``missing``: a port, GPU, link or counter read before is not there after (fails);
- ``reset``: a counter went down, so it was cleared or wrapped and its increase is unknown (fails);
- ``unreadable``: a counter or a whole tree could not be read, so it is not judged (fails);
- ``saturated``: a counter was at its maximum before and cannot show an increase (warns);
- ``unsupported``: NVML does not report NVLink counters on the node, or some of them (warns).
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from pytest_gpucluster.workloads.fabric_counters import (
    IB_ERROR_COUNTERS,
    IB_HW_ERROR_COUNTERS,
    NVLINK_ERROR_COUNTERS,
    FabricSnapshot,
    GpuNvLinks,
    IbPortCounters,
)

KNOWN_COUNTERS = (*IB_ERROR_COUNTERS, *IB_HW_ERROR_COUNTERS, *NVLINK_ERROR_COUNTERS)
FAILING_KINDS = frozenset({"increase", "missing", "reset", "unreadable"})


@dataclass(frozen=True)
class FabricFinding:
    """One thing the comparison found; ``where`` is ``node:hca port N``, ``node:gpuN link L``,
    ``node:gpuN`` or ``node``; ``counter`` is empty when the finding is about a whole port or GPU."""

    kind: str
    where: str
    counter: str
    sentence: str

    @property
    def fails(self) -> bool:
        """Whether this finding fails the check (the others are warnings)."""
        return self.kind in FAILING_KINDS


def check_bounds(bounds: Mapping[str, int]) -> dict[str, int]:
    """``bounds`` as a plain dict; raises ValueError naming a counter that is unknown or a bound
    that is negative."""
    for name, bound in bounds.items():
        if name not in KNOWN_COUNTERS:
            close = difflib.get_close_matches(name, KNOWN_COUNTERS, n=1)
            hint = f" Perhaps you meant {close[0]!r}?" if close else f" Known: {', '.join(KNOWN_COUNTERS)}."
            raise ValueError(f"fabric counter bound {name!r}: no such counter.{hint}")
        if not isinstance(bound, int) or isinstance(bound, bool) or bound < 0:
            raise ValueError(f"fabric counter bound {name!r}: {bound!r} is not a whole number ≥ 0")
    return dict(bounds)


def _span(seconds: float) -> str:
    total = round(max(0.0, seconds))
    if total < 60:
        return f"{total} s"
    minutes, secs = divmod(total, 60)
    if minutes < 60:
        return f"{minutes} min {secs} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes} min"


class _Diff:
    """Findings of one node's pair of snapshots."""

    def __init__(self, before: FabricSnapshot, after: FabricSnapshot, bounds: Mapping[str, int]) -> None:
        self.bounds = bounds
        self.node = before.node
        self.span = _span(after.time_s - before.time_s)
        self.found: list[FabricFinding] = []

    def add(self, kind: str, where: str, counter: str, text: str) -> None:
        self.found.append(FabricFinding(kind, where, counter, f"{where}: {text}"))

    def counters(
        self, where: str, before: Mapping[str, int], after: Mapping[str, int], widths: Mapping[str, int]
    ) -> None:
        for name, old in before.items():
            new = after.get(name)
            width = widths.get(name)
            top = 2**width - 1 if width else None
            if new is None:
                self.add("missing", where, name, f"{name} read before the run ({old}), missing after")
            elif new < old:
                text = f"{name} went down {old} → {new} over {self.span}: the counter was reset or wrapped, "
                self.add("reset", where, name, text + "so its increase during the run is unknown")
            elif new - old > self.bounds.get(name, 0):
                allowed = self.bounds.get(name, 0)
                text = f"{name} rose {old} → {new} (+{new - old}, at most +{allowed} allowed) over {self.span}"
                if top is not None and new == top:
                    text += f"; it is now at its {width}-bit maximum, so the true increase may be larger"
                self.add("increase", where, name, text)
            elif top is not None and old == top:
                text = f"{name} was at its {width}-bit maximum {top} before the run and cannot show an increase; "
                self.add("saturated", where, name, text + "clear the port's counters to judge it")

    def ib(self, before: Iterable[IbPortCounters], after: Iterable[IbPortCounters]) -> None:
        later = {(p.hca, p.port): p for p in after}
        for port in before:
            where = f"{self.node}:{port.hca} port {port.port}"
            now = later.get((port.hca, port.port))
            if now is None:
                self.add("missing", where, "", "read before the run, missing after (HCA gone or its driver reset)")
                continue
            for name in sorted(set(port.unreadable) | set(now.unreadable)):
                self.add("unreadable", where, name, f"{name} is not a number in sysfs; not judged")
            known_before = {k: v for k, v in port.counters.items() if k not in now.unreadable}
            self.counters(where, known_before, now.counters, IB_ERROR_COUNTERS)

    def nvlink(self, before: FabricSnapshot, after: FabricSnapshot) -> None:
        if not before.nvml_status.startswith("ok"):
            text = f"NVLink error counters not read ({before.nvml_status}); not checked"
            self.add("unsupported", self.node, "", text)
            return
        if not after.nvml_status.startswith("ok"):
            if before.gpus:
                self.add(
                    "missing",
                    self.node,
                    "",
                    f"NVLink error counters read before the run, not after ({after.nvml_status})",
                )
            return
        later = {g.index: g for g in after.gpus}
        unsupported: dict[str, list[str]] = {}
        for gpu in before.gpus:
            self._gpu(gpu, later.get(gpu.index), unsupported)
        for counter, gpus in unsupported.items():
            labels = ", ".join(sorted(set(gpus), key=_gpu_order))
            self.add("unsupported", self.node, counter, f"NVML does not report {counter} on {labels}; not checked")

    def _gpu(self, gpu: GpuNvLinks, now: GpuNvLinks | None, unsupported: dict[str, list[str]]) -> None:
        where = f"{self.node}:gpu{gpu.index}"
        if now is None:
            if gpu.links:
                self.add("missing", where, "", "NVLink counters read before the run, GPU missing after")
            return
        for error in (*gpu.errors, *now.errors):
            self.add("unreadable", where, "", f"NVLink counters: {error}; not judged")
        later = {link.link: link for link in now.links}
        for link in gpu.links:
            link_where = f"{where} link {link.link}"
            current = later.get(link.link)
            if current is None:
                self.add("missing", link_where, "", "read before the run, missing after")
                continue
            for name in link.unsupported:
                unsupported.setdefault(name, []).append(f"gpu{gpu.index}")
            self.counters(link_where, link.counters, current.counters, {})


def _gpu_order(label: str) -> int:
    return int(label.removeprefix("gpu"))


def compare(
    before: FabricSnapshot, after: FabricSnapshot, bounds: Mapping[str, int] | None = None
) -> list[FabricFinding]:
    """Findings for one node's counters between ``before`` and ``after``."""
    diff = _Diff(before, after, check_bounds(bounds or {}))
    for snap, when in ((before, "before"), (after, "after")):
        if snap.error:
            diff.add("unreadable", snap.node, "", f"InfiniBand counters not read {when} the run: {snap.error}")
    if not before.error and not after.error:
        diff.ib(before.ib_ports, after.ib_ports)
    diff.nvlink(before, after)
    return diff.found


def compare_nodes(
    before: Iterable[FabricSnapshot], after: Iterable[FabricSnapshot], bounds: Mapping[str, int] | None = None
) -> list[FabricFinding]:
    """Findings for every node read before the run; a node with no reading after is missing."""
    later = {s.node: s for s in after}
    found: list[FabricFinding] = []
    for snap in sorted(before, key=lambda s: s.node):
        now = later.get(snap.node)
        if now is None:
            found.append(
                FabricFinding(
                    "missing",
                    snap.node,
                    "",
                    f"{snap.node}: fabric counters read before the "
                    "run, none after (the node did not answer); not judged",
                )
            )
        else:
            found += compare(snap, now, bounds)
    return found


def problems(findings: Iterable[FabricFinding]) -> list[str]:
    """The sentences of the findings that fail."""
    return [f.sentence for f in findings if f.fails]


def warnings(findings: Iterable[FabricFinding]) -> list[str]:
    """The sentences of the findings that only warn."""
    return [f.sentence for f in findings if not f.fails]

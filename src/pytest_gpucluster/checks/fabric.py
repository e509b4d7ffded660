"""Fabric error counters before and after the run's traffic: what rose, how fast, what vanished.

``compare`` takes two ``FabricSnapshot`` of one node (before the first workload, after every
other job) and the rules in force (``fabric_rules``) and returns one ``FabricFinding`` per thing
to say, each one sentence naming the node and the GPUs, links or ports it covers, folded:

- ``increase``: a family of counters rose; judged as a rate against the family's lines, one
  finding per node, family and status (fail, warn, or note: recorded, not judged), with every
  port's or link's before and after in ``detail``;
- ``missing``: a port, GPU, link or counter read before is not there after (fails);
- ``reset``: a counter went down, so it was cleared or wrapped and its increase is unknown (fails);
- ``unreadable``: a counter or a whole tree could not be read, so it is not judged (fails);
- ``saturated``: a counter was at its maximum before and cannot show an increase (warns);
- ``unsupported``: NVML does not report some NVLink counters on the node's GPUs (warns);
- ``unread``: NVLink was not read on the node. Where the node's GPUs are real
  (``nvlink_required``) the check cannot judge NVLink: ``incomplete``; elsewhere it warns.

Each finding keeps the places it covers; ``FabricFinding.finding`` makes it the verdict's
finding of the one port (``mlx5_0/1``), NVLink (``link 5`` of its GPU) or GPU it names, else of
the node.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from pytest_gpucluster.checks import fabric_text as text
from pytest_gpucluster.checks.fabric_text import Place
from pytest_gpucluster.config.fabric_rules import DEFAULT_RULES, FAMILY_OF, FabricRule, Scope
from pytest_gpucluster.verdict import Finding, Severity
from pytest_gpucluster.workloads.fabric_counters import IB_ERROR_COUNTERS, FabricSnapshot, GpuNvLinks

Status = Literal["fail", "incomplete", "warn", "note"]
# A status's severity as a verdict's finding; a note is said, never judged.
SEVERITY: Mapping[Status, Severity] = {"fail": "fail", "incomplete": "not_judged", "warn": "warn"}
_GPU = re.compile(r"gpu(\d+)")


@dataclass(frozen=True)
class FabricFinding:
    """One thing the comparison found on ``node``; ``subject`` is the family of an increase, the
    counter of a reset, saturated, unreadable or missing counter, empty for a whole port or GPU."""

    kind: str
    status: Status
    node: str
    subject: str
    sentence: str
    detail: tuple[Mapping[str, Any], ...] = ()
    places: tuple[Place, ...] = ()  # the ports, links or GPUs it covers; none: the node

    @property
    def fails(self) -> bool:
        """Whether this finding fails the check."""
        return self.status == "fail"

    def finding(self) -> Finding | None:
        """The verdict's finding (None for a note): of the one IB port, NVLink or GPU it covers,
        else of its node."""
        if self.status not in SEVERITY:
            return None
        return Finding.on_node(self.node, self.sentence, severity=SEVERITY[self.status], **_place_fields(self.places))

    def to_json(self) -> dict[str, Any]:
        """For the results record."""
        out: dict[str, Any] = {"kind": self.kind, "status": self.status, "subject": self.subject}
        return {**out, "text": self.sentence, "detail": [dict(d) for d in self.detail]}


@dataclass
class _Events:
    """Per (kind, counter): each place with its values before and after."""

    by: dict[tuple[str, str], list[tuple[Place, int | None, int | None]]] = field(default_factory=dict)

    def add(self, kind: str, counter: str, place: Place, before: int | None = None, after: int | None = None) -> None:
        self.by.setdefault((kind, counter), []).append((place, before, after))


@dataclass(frozen=True)
class _Rise:
    place: Place
    counter: str
    before: int
    after: int


def _place_fields(places: Iterable[Place]) -> dict[str, Any]:
    """``port`` and ``gpu`` of a finding covering ``places``: one IB port (``mlx5_0/1``), one
    NVLink (``link 5`` of its GPU), links of one GPU (the GPU); nothing for more or none."""
    covered = set(places)
    units = {p.unit for p in covered}
    if len(units) != 1:
        return {}
    (unit,) = units
    hca, space, port = unit.partition(" port ")
    if space:
        return {"port": f"{hca}/{port}"}
    gpu = _GPU.fullmatch(unit)
    if gpu is None:
        return {}
    links = {p.link for p in covered}
    if len(links) == 1 and None not in links:
        return {"gpu": int(gpu.group(1)), "port": f"link {links.pop()}"}
    return {"gpu": int(gpu.group(1))}


def _where(place: Place) -> str:
    return place.unit + (f" link {place.link}" if place.link is not None else "")


class _Diff:
    """Findings of one node's pair of snapshots."""

    def __init__(self, before: FabricSnapshot, after: FabricSnapshot, rules: Mapping[str, FabricRule]) -> None:
        self.rules = rules
        self.node = before.node
        self.seconds = after.time_s - before.time_s
        self.span = text.span(self.seconds)
        self.events = _Events()
        self.links_of: dict[str, int] = {}
        self.found: list[FabricFinding] = []

    def say(
        self, kind: str, status: Status, subject: str, sentence: str, detail: Any = (), places: Iterable[Place] = ()
    ) -> None:
        found = FabricFinding(
            kind, status, self.node, subject, f"{self.node}: {sentence}", tuple(detail), tuple(places)
        )
        self.found.append(found)

    def counters(self, place: Place, before: Mapping[str, int], after: Mapping[str, int]) -> None:
        for name, old in before.items():
            new = after.get(name)
            width = IB_ERROR_COUNTERS.get(name) if place.link is None else None
            top = 2**width - 1 if width else None
            if new is None:
                self.events.add("missing", name, place, old)
            elif new < old:
                self.events.add("reset", name, place, old, new)
            elif new > old:
                self.events.add("increase", name, place, old, new)
            elif top is not None and old == top:
                self.events.add("saturated", name, place, old, new)

    # ---------------------------------------------------------------- reading both snapshots

    def ib(self, before: FabricSnapshot, after: FabricSnapshot) -> None:
        later = {(p.hca, p.port): p for p in after.ib_ports}
        for port in before.ib_ports:
            place = Place(f"{port.hca} port {port.port}")
            now = later.get((port.hca, port.port))
            if now is None:
                self.events.add("port-missing", "", place)
                continue
            for name in sorted(set(port.unreadable) | set(now.unreadable)):
                self.events.add("unreadable", name, place)
            known_before = {k: v for k, v in port.counters.items() if k not in now.unreadable}
            self.counters(place, known_before, now.counters)

    def aer(self, before: FabricSnapshot, after: FabricSnapshot) -> None:
        """The GPUs' and HCAs' PCIe AER totals; a device read before and not after has each of
        its counters said missing."""
        later = {a.device: a for a in after.aer}
        for device in before.aer:
            now = later.get(device.device)
            self.counters(Place(device.device), device.counters, now.counters if now is not None else {})

    def nvlink(self, before: FabricSnapshot, after: FabricSnapshot, required: bool) -> None:
        if not before.nvml_status.startswith("ok"):
            why = before.nvml_status.removeprefix("unsupported: ")
            if required:
                self.say(
                    "unread",
                    "incomplete",
                    "",
                    f"NVLink error counters not read ({why}) although the profile's GPUs are real; NVLink not judged",
                )
            else:
                self.say("unread", "warn", "", f"NVLink error counters not read ({why}); not checked")
            return
        if not after.nvml_status.startswith("ok"):
            if before.gpus:
                why = after.nvml_status.removeprefix("unsupported: ")
                self.say("missing", "fail", "", f"NVLink error counters read before the run, not after ({why})")
            return
        if required and not before.gpus:
            self.say("unread", "incomplete", "", "NVML sees no GPU in a job holding the node's GPUs; NVLink not judged")
            return
        later = {g.index: g for g in after.gpus}
        for gpu in before.gpus:
            self._gpu(gpu, later.get(gpu.index))

    def _gpu(self, gpu: GpuNvLinks, now: GpuNvLinks | None) -> None:
        unit = f"gpu{gpu.index}"
        self.links_of[unit] = len(gpu.links)
        if now is None:
            if gpu.links or gpu.pcie:
                self.events.add("gpu-missing", "", Place(unit))
            return
        for error in dict.fromkeys((*gpu.errors, *now.errors)):
            self.say("unreadable", "fail", "", f"{unit} link counters: {error}; not judged", places=[Place(unit)])
        # The GPU's PCIe link: its counters belong to the GPU, not to one of its NVLinks.
        for name in gpu.pcie_unsupported:
            self.events.add("unsupported", name, Place(unit))
        self.counters(Place(unit), gpu.pcie, now.pcie)
        later = {link.link: link for link in now.links}
        for link in gpu.links:
            place = Place(unit, link.link)
            current = later.get(link.link)
            if current is None:
                self.events.add("link-missing", "", place)
                continue
            for name in link.unsupported:
                self.events.add("unsupported", name, Place(unit))
            self.counters(place, link.counters, current.counters)

    # ---------------------------------------------------------------- sentences

    def conclude(self) -> None:
        self._increases()
        for (kind, counter), items in self.events.by.items():
            if kind != "increase":
                self._other(kind, counter, items)

    def _increases(self) -> None:
        rose: dict[str, dict[str, list[_Rise]]] = {}
        for (kind, counter), items in self.events.by.items():
            if kind == "increase":
                for place, old, new in items:
                    assert old is not None and new is not None
                    rise = _Rise(place, counter, old, new)
                    rose.setdefault(FAMILY_OF.get(counter, counter), {}).setdefault(place.unit, []).append(rise)
        rules = dict(self.rules)
        for family, found in rose.items():
            if family not in rules:  # a counter no family claims: any increase fails, never unjudged
                scope: Scope = "port" if next(iter(found.values()))[0].place.link is None else "gpu"
                rules[family] = FabricRule(family, family, (family,), scope, fail=0, source="no family")
        for family, rule in rules.items():
            if family not in rose:
                continue
            units = rose[family]
            by_status: dict[Status, list[str]] = {}
            totals = {unit: sum(r.after - r.before for r in rises) for unit, rises in units.items()}
            for unit in sorted(units, key=text.unit_order):
                by_status.setdefault(rule.status(totals[unit], self.seconds), []).append(unit)
            for status in ("fail", "warn", "note"):
                if status in by_status:
                    self._family(rule, status, {u: units[u] for u in by_status[status]}, totals)

    def _family(
        self, rule: FabricRule, status: Status, units: Mapping[str, list[_Rise]], totals: Mapping[str, int]
    ) -> None:
        if rule.counts_only:
            amount = f"+{sum(totals[u] for u in units)}"
        else:
            amount = text.rates((rule.rate(totals[u], self.seconds) for u in units), rule.per)
        rises = [r for unit_rises in units.values() for r in unit_rises]
        where = text.places([r.place for r in rises], self.links_of)
        sentence = f"{rule.title} {amount} on {where} over {self.span} ({rule.lines()})"
        if status != "note" and rule.meaning:
            sentence += f": {rule.meaning}"
        for r in rises:
            width = IB_ERROR_COUNTERS.get(r.counter) if r.place.link is None else None
            if width and r.after == 2**width - 1:
                sentence += (
                    f"; {r.counter} on {r.place.unit} is now at its {width}-bit maximum, "
                    "so the true increase may be larger"
                )
        detail = [{"where": _where(r.place), "counter": r.counter, "before": r.before, "after": r.after} for r in rises]
        self.say("increase", status, rule.family, sentence, detail, [r.place for r in rises])

    def _other(self, kind: str, counter: str, items: list[tuple[Place, int | None, int | None]]) -> None:
        where = text.places((p for p, _, _ in items), self.links_of if kind != "link-missing" else None)
        detail = [{"where": _where(p), "counter": counter, "before": b, "after": a} for p, b, a in items]
        places = [p for p, _, _ in items]
        if kind == "reset":
            (_, old, new), many = items[0], len(items) > 1
            values = f"(e.g. {old} → {new})" if many else f"{old} → {new}"
            sentence = (
                f"{counter} went down {values} on {where} over {self.span}: the counter was reset or wrapped, "
                "so its increase during the run is unknown"
            )
            self.say("reset", "fail", counter, sentence, detail, places)
        elif kind == "missing":
            self.say(
                "missing", "fail", counter, f"{counter} on {where} read before the run, missing after", detail, places
            )
        elif kind == "link-missing":
            self.say("missing", "fail", "", f"NVLink {where} read before the run, missing after", detail, places)
        elif kind == "port-missing":
            why = "HCA gone or its driver reset"
            self.say("missing", "fail", "", f"{where} read before the run, missing after ({why})", detail, places)
        elif kind == "gpu-missing":
            sentence = f"link counters of {where} read before the run, GPU missing after"
            self.say("missing", "fail", "", sentence, places=places)
        elif kind == "unreadable":
            sentence = f"{counter} on {where} is not a number in sysfs; not judged"
            self.say("unreadable", "fail", counter, sentence, places=places)
        elif kind == "saturated":
            width = IB_ERROR_COUNTERS[counter]
            sentence = (
                f"{counter} on {where} was at its {width}-bit maximum {2**width - 1} before the run and cannot "
                "show an increase; clear the port's counters to judge it"
            )
            self.say("saturated", "warn", counter, sentence, detail, places)
        elif kind == "unsupported":
            gpus = text.labels(sorted({p.unit for p, _, _ in items}, key=text.unit_order))
            sentence = f"NVML does not report {counter} on {gpus}; not checked"
            self.say("unsupported", "warn", counter, sentence, places=places)


def compare(
    before: FabricSnapshot,
    after: FabricSnapshot,
    rules: Mapping[str, FabricRule] = DEFAULT_RULES,
    *,
    nvlink_required: bool = False,
) -> list[FabricFinding]:
    """Findings for one node's counters between ``before`` and ``after``. ``nvlink_required``: the
    node's GPUs are real, so NVLink not read leaves the check incomplete instead of warning."""
    diff = _Diff(before, after, rules)
    for snap, when in ((before, "before"), (after, "after")):
        if snap.error:
            diff.say("unreadable", "fail", "", f"InfiniBand counters not read {when} the run: {snap.error}")
    if not before.error and not after.error:
        diff.ib(before, after)
    diff.nvlink(before, after, nvlink_required)
    diff.aer(before, after)
    diff.conclude()
    return diff.found


def compare_nodes(
    before: Iterable[FabricSnapshot],
    after: Iterable[FabricSnapshot],
    rules: Mapping[str, FabricRule] = DEFAULT_RULES,
    *,
    nvlink_required: bool = False,
) -> list[FabricFinding]:
    """Findings for every node read before the run; a node with no reading after is missing."""
    later = {s.node: s for s in after}
    found: list[FabricFinding] = []
    for snap in sorted(before, key=lambda s: s.node):
        now = later.get(snap.node)
        if now is None:
            why = "none after (the node did not answer); not judged"
            sentence = f"{snap.node}: fabric counters read before the run, {why}"
            found.append(FabricFinding("missing", "fail", snap.node, "", sentence))
        else:
            found += compare(snap, now, rules, nvlink_required=nvlink_required)
    return found


def sentences(findings: Iterable[FabricFinding], status: Status) -> list[str]:
    """The sentences of the findings of one status, in the order found."""
    return [f.sentence for f in findings if f.status == status]


def judged(findings: Iterable[FabricFinding]) -> list[Finding]:
    """The verdict's findings: every one that fails, warns or leaves the check not judged, in the
    order found (notes are said, not judged)."""
    return [v for v in (f.finding() for f in findings) if v is not None]

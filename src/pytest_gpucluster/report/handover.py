"""What the handover sheet states beyond the verdict, from the results document and its recorded
verdicts: every warning in full, what was not tested and why, the command and the selection, the
parties and the contract's reference (``[profiles.NAME.handover]``), the hardware handed over
(each node's GPUs by serial and UUID, where the inventory holds them), the results file's sha256,
and whether the sheet is one to sign (only an ACCEPTED run is an acceptance). Pure: plain data for
``acceptance.html.j2``; nothing is decided here.
"""

from __future__ import annotations

import hashlib
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_gpucluster.report.plots import natural
from pytest_gpucluster.verdict import Recorded, first_line
from pytest_gpucluster.verdict.findings import test_label
from pytest_gpucluster.verdict.fold import fold_lines
from pytest_gpucluster.verdict.ranges import hostlist

# The parties the sheet names, in the order it prints them (``config.profile.Handover``).
PARTIES = (("customer", "Customer"), ("provider", "Provider"), ("reference", "Reference"))


@dataclass(frozen=True)
class ResultsFile:
    """The results file a run wrote (or a page was rendered from): its path and sha256."""

    path: str
    sha256: str

    @classmethod
    def of(cls, path: Path) -> ResultsFile | None:
        """The file at ``path`` with its digest; None where it cannot be read."""
        try:
            return cls(str(path), hashlib.sha256(path.read_bytes()).hexdigest())
        except OSError:
            return None


@dataclass(frozen=True)
class NotTested:
    """One group of checks the run did not test: why, and which."""

    why: str  # "not applicable: <reason>", "not selected (-m 'quick')", "not judged: <reason>", ...
    checks: tuple[str, ...]


@dataclass(frozen=True)
class NodeHardware:
    """One node as handed over: its GPUs, each ``gpu0 serial 1654024076930, GPU-e7d1…``."""

    node: str
    gpus: tuple[str, ...]


@dataclass(frozen=True)
class Sheet:
    """What the handover sheet adds to the banner and the cluster facts."""

    signable: bool
    warnings: tuple[str, ...]
    not_tested: tuple[NotTested, ...]
    command: str
    selection: str
    parties: tuple[tuple[str, str], ...]  # (label, value), only those set
    hardware: tuple[NodeHardware, ...]
    results_file: ResultsFile | None


def selection_words(selection: Mapping[str, Any]) -> str:
    """How the run chose its checks: its ``-m`` and ``-k`` expressions, the ``--deselect`` count,
    the files or tests the command line names; or ``every check of the suite``."""
    parts = []
    if selection.get("markexpr"):
        parts.append(f"-m {shlex.quote(str(selection['markexpr']))}")
    if selection.get("keyword"):
        parts.append(f"-k {shlex.quote(str(selection['keyword']))}")
    if selection.get("deselect"):
        parts.append(f"--deselect of {len(selection['deselect'])}")
    if selection.get("named"):
        parts.append(f"named on the command line: {', '.join(map(str, selection['named']))}")
    return "; ".join(parts) or "every check of the suite"


_NODE_SLOT = "\x00"


def by_reason(lines: Sequence[str], nodes: Sequence[str] = ()) -> dict[str, list[str]]:
    """``"<check>: <reason>"`` lines grouped by reason, in order. Reasons that differ only in the
    one node they name (``dcgmi is not installed on node1`` / ``on node2``) are one reason naming
    those nodes as a hostlist (``on node[1-2]``)."""
    names = sorted({n for n in nodes if n}, key=len, reverse=True)
    pattern = re.compile(rf"(?<![\w.\-])({'|'.join(map(re.escape, names))})(?![\w\-])") if names else None
    groups: dict[str, tuple[list[str], list[str]]] = {}
    for line in lines:
        check, _, reason = line.partition(": ")
        reason = reason or "no reason recorded"
        key, node = reason, ""
        named = set(pattern.findall(reason)) if pattern is not None else set()
        if pattern is not None and len(named) == 1:
            key, node = pattern.sub(_NODE_SLOT, reason), named.pop()
        in_group = groups.setdefault(key, ([], []))
        in_group[0].append(check)
        if node and node not in in_group[1]:
            in_group[1].append(node)
    return {
        key.replace(_NODE_SLOT, hostlist(found)) if found else key: checks for key, (checks, found) in groups.items()
    }


def not_tested(doc: Mapping[str, Any], recorded: Recorded) -> list[NotTested]:
    """Every check the run did not test, grouped by why: not applicable (each reason, such as a
    tool not installed on the nodes), not selected by the command line (with the selection that
    left it out), optional and not run, and selected but not judged (each reason)."""
    acc = recorded.acceptance
    selection: Mapping[str, Any] = doc.get("selection") or {}
    nodes = [str(n) for n in doc.get("nodes", [])]
    out = [
        NotTested(f"not applicable: {reason}", tuple(checks))
        for reason, checks in by_reason(acc.not_applicable, nodes).items()
    ]
    if acc.not_selected:
        out.append(NotTested(f"required, not selected ({selection_words(selection)})", tuple(acc.not_selected)))
    ran = {str(t.get("nodeid")) for t in doc.get("tests", [])}
    optional = [test_label(n) for n in selection.get("optional") or [] if n not in ran]
    if optional:
        out.append(NotTested("optional (slow), not selected: not part of the required set", tuple(optional)))
    if acc.verdict == "PARTIAL" and not acc.not_selected and selection.get("named"):
        out.append(NotTested(f"not collected: the command line names only {', '.join(selection['named'])}", ()))
    unjudged = [
        f"{test_label(t['nodeid'])}: {first_line(str(t.get('message') or 'no reason recorded'))}"
        for t in doc.get("tests", [])
        if t.get("verdict") in ("not_judged", "fault", "interrupted")
    ]
    out += [
        NotTested(f"selected, not judged: {reason}", tuple(checks))
        for reason, checks in by_reason(unjudged, nodes).items()
    ]
    return out


def hardware(doc: Mapping[str, Any]) -> list[NodeHardware]:
    """Each node's GPUs by index, serial and UUID, as the inventory recorded them (nodes without
    an inventory, or GPUs without either identity, are left out)."""
    out = []
    inventory: Mapping[str, Any] = doc.get("inventory") or {}
    for node in sorted(inventory, key=natural):
        facts = inventory[node]
        gpus = facts.get("gpus") if isinstance(facts, Mapping) else None
        lines = []
        for g in gpus if isinstance(gpus, list) else []:
            if not isinstance(g, Mapping) or not (g.get("serial") or g.get("uuid")):
                continue
            ids = [f"serial {g['serial']}" if g.get("serial") else "", str(g.get("uuid") or "")]
            lines.append(f"gpu{g.get('index', '?')} " + ", ".join(i for i in ids if i))
        if lines:
            out.append(NodeHardware(str(node), tuple(lines)))
    return out


def sheet(doc: Mapping[str, Any], recorded: Recorded, results_file: ResultsFile | None = None) -> Sheet:
    """The handover sheet's content (module docstring)."""
    acc = recorded.acceptance
    selection: Mapping[str, Any] = doc.get("selection") or {}
    command = selection.get("command") or []
    parties: Mapping[str, Any] = (doc.get("cluster") or {}).get("handover") or {}
    return Sheet(
        signable=acc.verdict == "ACCEPTED",
        warnings=tuple(fold_lines(list(acc.warnings), [str(n) for n in doc.get("nodes", [])])),
        not_tested=tuple(not_tested(doc, recorded)),
        command=shlex.join(["pytest", *map(str, command)]) if command else "not recorded",
        selection=selection_words(selection) if selection else "not recorded",
        parties=tuple((label, str(parties[key])) for key, label in PARTIES if parties.get(key)),
        hardware=tuple(hardware(doc)),
        results_file=results_file,
    )

"""The node configuration to fix first: every ``node_setting`` finding of the run grouped per node,
each setting once with the value found, the value expected and how to change it, beside the
other checks that failed or warned on that node (the symptoms such a setting may explain: a
memlock limit under a slow network check, a governor under a slow GEMM). The report and the
terminal show a node with a failing setting ahead of the failures (the setting convicts it); a
node whose settings only warn after them, since a warning explains no failure and the culprit
comes first. Pure: the results document in, frozen dataclasses out; it decides nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pytest_gpucluster.verdict.findings import test_label

_SHOWN = ("fail", "warn")


@dataclass(frozen=True)
class SettingFix:
    """One setting of one node, as its findings name it (on several of its GPUs, perhaps)."""

    setting: str
    found: str
    expected: str
    remedy: str
    severity: str  # the worst of its findings: fail or warn
    gpus: tuple[int, ...]  # the GPUs it was found on, none for a setting of the node
    checks: tuple[str, ...]  # the checks that found it


@dataclass(frozen=True)
class NodeFixes:
    """A node's settings to fix, and its other checks that failed or warned."""

    node: str
    fixes: tuple[SettingFix, ...]
    symptoms: tuple[str, ...]


@dataclass
class _Seen:
    severity: str
    gpus: dict[int, None] = field(default_factory=dict)
    checks: dict[str, None] = field(default_factory=dict)


def node_fixes(doc: Mapping[str, Any]) -> list[NodeFixes]:
    """Every node with a setting to fix, those with a failing setting first, in the order the
    run names its nodes."""
    settings: dict[str, dict[tuple[str, str, str, str], _Seen]] = {}
    symptoms: dict[str, dict[str, None]] = {}
    for test in doc.get("tests", []):
        label = test_label(str(test.get("nodeid", "")))
        for f in test.get("findings") or []:
            severity = str(f.get("severity", "fail"))
            if severity not in _SHOWN:
                continue
            nodes = [str(n) for n in f.get("nodes") or ()]
            if f.get("scope") != "node_setting":
                for node in nodes:
                    symptoms.setdefault(node, {})[label] = None
                continue
            setting, found, expected, remedy = (str(f.get(k, "")) for k in ("setting", "found", "expected", "remedy"))
            seen = settings.setdefault(nodes[0] if nodes else "?", {}).setdefault(
                (setting, found, expected, remedy), _Seen(severity)
            )
            if severity == "fail":
                seen.severity = "fail"
            if f.get("gpu") is not None:
                seen.gpus[int(f["gpu"])] = None
            seen.checks[label] = None
    order = {str(n): i for i, n in enumerate(doc.get("nodes", []))}
    out = []
    for node, found_here in settings.items():
        fixes = tuple(
            SettingFix(*key, seen.severity, tuple(sorted(seen.gpus)), tuple(seen.checks))
            for key, seen in sorted(found_here.items(), key=lambda kv: kv[1].severity != "fail")
        )
        own_checks = {c for fix in fixes for c in fix.checks}
        others = tuple(s for s in symptoms.get(node, {}) if s not in own_checks)
        out.append(NodeFixes(node, fixes, others))
    return sorted(
        out, key=lambda n: (all(f.severity != "fail" for f in n.fixes), order.get(n.node, len(order)), n.node)
    )


def failing(fixes: list[NodeFixes]) -> tuple[list[NodeFixes], list[NodeFixes]]:
    """``fixes`` split into the nodes with a failing setting (shown ahead of the failures) and
    those whose settings only warn (shown after them), each in its order."""
    ahead = [n for n in fixes if any(f.severity == "fail" for f in n.fixes)]
    return ahead, [n for n in fixes if n not in ahead]

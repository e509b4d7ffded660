"""One node's pair of fabric snapshots judged (``checks.fabric``) into what its check does:
``judged`` are the verdict's findings (failures, warnings, and NVLink left unread on real GPUs,
which leaves the check not judged, never passed), ``notes`` are said live, and ``record`` keeps
every family that rose, per port and link, with the rule it was judged by, in the results."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pytest_gpucluster.checks import fabric
from pytest_gpucluster.config.fabric_rules import FabricRule
from pytest_gpucluster.verdict import Finding
from pytest_gpucluster.workloads.fabric_counters import FabricSnapshot


@dataclass(frozen=True)
class NodeFabric:
    """What a node's fabric check reports and ends in."""

    findings: tuple[fabric.FabricFinding, ...]
    record: dict[str, Any]  # the results' ``fabric`` entry
    notes: tuple[str, ...]
    judged: tuple[Finding, ...]  # each of its port, link, GPU or node
    what: str  # the failure's context: the jobs and the node


def _rule_json(rule: FabricRule) -> dict[str, Any]:
    return {
        "counters": list(rule.counters),
        "per": f"{rule.per} per {rule.scope}",
        "warn": rule.warn,
        "fail": rule.fail,
        "lines": rule.lines(),
        "source": rule.source,
        "set_in": rule.set_in,
    }


def judge_node(
    node: str,
    before: FabricSnapshot,
    after: FabricSnapshot | None,
    *,
    rules: Mapping[str, FabricRule],
    nvlink_required: bool,
    job_ids: Sequence[str],
) -> NodeFabric:
    """Judge ``node``'s counters between ``before`` and ``after`` (None: the node did not answer
    after the run)."""
    found = fabric.compare_nodes([before], [after] if after is not None else [], rules, nvlink_required=nvlink_required)
    families = {f.subject for f in found if f.kind == "increase"}
    record = {
        "node": node,
        "jobs": list(job_ids),
        "span_s": round(after.time_s - before.time_s, 3) if after is not None else None,
        "ports": len(before.ib_ports),
        "gpus": len(before.gpus),
        "findings": [f.to_json() for f in found],
        "rules": {family: _rule_json(rules[family]) for family in sorted(families)},
    }
    return NodeFabric(
        findings=tuple(found),
        record=record,
        notes=tuple(fabric.sentences(found, "note")),
        judged=tuple(fabric.judged(found)),
        what=f"jobs {' → '.join(job_ids)}: fabric error counters of {node}",
    )

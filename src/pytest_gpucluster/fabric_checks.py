"""Login side of the fabric counter check: one node's pair of snapshots judged (``checks.fabric``)
and turned into the test's outcome: failures fail the test, warnings warn, NVLink left unread on
real GPUs makes the check incomplete (a skip, never a pass), and every family that rose is kept
in the results, per port and link, with the rule it was judged by."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pytest

from pytest_gpucluster.checks import fabric
from pytest_gpucluster.checks.fabric_rules import FabricRule
from pytest_gpucluster.outcomes import ThresholdWarning
from pytest_gpucluster.workloads.fabric_counters import FabricSnapshot


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
    judge: Any,
    record: Callable[..., None],
    node: str,
    before: FabricSnapshot,
    after: FabricSnapshot | None,
    *,
    rules: Mapping[str, FabricRule],
    nvlink_required: bool,
    job_ids: Sequence[str],
    say: Callable[[str], None] | None = None,
) -> list[fabric.FabricFinding]:
    """Judge ``node``'s counters between ``before`` and ``after`` (None: the node did not answer
    after the run) with the ``judge`` fixture; returns the findings."""
    found = fabric.compare_nodes([before], [after] if after is not None else [], rules, nvlink_required=nvlink_required)
    families = {f.subject for f in found if f.kind == "increase"}
    record(
        "fabric",
        node=node,
        jobs=list(job_ids),
        span_s=round(after.time_s - before.time_s, 3) if after is not None else None,
        ports=len(before.ib_ports),
        gpus=len(before.gpus),
        findings=[f.to_json() for f in found],
        rules={family: _rule_json(rules[family]) for family in sorted(families)},
    )
    for line in fabric.sentences(found, "note"):
        if say is not None:
            say(line)
    for line in fabric.warnings(found):
        warnings.warn(ThresholdWarning(line), stacklevel=2)
    judge.problems(fabric.problems(found), f"jobs {' → '.join(job_ids)}: fabric error counters of {node}")
    incomplete = fabric.sentences(found, "incomplete")
    if incomplete:
        pytest.skip("; ".join(incomplete))
    return found

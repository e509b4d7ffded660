"""The node probe's readings as the checks take them: one part of every node's probe, the nodes
whose reading came back, and why a node has none (the sentence its check fails with)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pytest_gpucluster.workloads.node_probe import NodeProbe, PartError


def part(probes: Mapping[str, NodeProbe], name: str) -> dict[str, Any]:
    """node → the reading of the probe's part ``name`` (a PartError where it raised there)."""
    return {node: probe.parts[name] for node, probe in probes.items() if name in probe.parts}


def good(found: Mapping[str, Any]) -> dict[str, Any]:
    """Only the nodes whose reading came back."""
    return {n: v for n, v in found.items() if v is not None and not isinstance(v, PartError)}


def missing(found: Mapping[str, Any], node: str, what: str) -> str | None:
    """Why ``node`` has no reading of ``what``, or None when it has one."""
    value = found.get(node)
    if isinstance(value, PartError):
        return f"{node}: reading {what} failed there: {value.error}"
    if value is None:
        answered = ", ".join(good(found)) or "none"
        return f"{node}: no {what} came back (nodes that answered: {answered})"
    return None

"""``--gpucluster-drain-failed``: the one place where a verdict acts on the cluster. After the run's verdict is
decided, each node it REJECTED is drained in Slurm with the first sentence that rejected it as
Slurm's reason, so no later job lands on it until an operator resumes it."""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from typing import Any

from pytest_gpucluster import slurm
from pytest_gpucluster.errors import GpuClusterError


def drain_rejected(
    nodes: Mapping[str, Any],
    *,
    executor: str,
    excluded: Collection[str] = (),
    drain: Callable[[str, str], None] = slurm.drain,
) -> dict[str, dict[str, str]]:
    """Drain each REJECTED node of ``nodes`` (the results' ``acceptance.nodes``) that this run
    tested: node → ``{"reason": ...}``, or ``{"error": ...}`` where Slurm refused. A node Slurm had
    excluded before the run keeps the reason it has; without Slurm (``executor`` local) nothing
    is drained."""
    if executor != "slurm":
        return {}
    out: dict[str, dict[str, str]] = {}
    for node, judged in (nodes.get("verdicts") or {}).items():
        if judged.get("verdict") != "REJECTED" or node in excluded:
            continue
        reason = slurm.drain_reason("rejected", (judged.get("reasons") or ["acceptance failed"])[0])
        try:
            drain(node, reason)
            out[node] = {"reason": reason}
        except GpuClusterError as exc:
            out[node] = {"error": str(exc)}
    return out

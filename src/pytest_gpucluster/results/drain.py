"""``--gpucluster-drain-failed``: the one place where a verdict acts on the cluster. After the run's verdict is
decided, each node it REJECTED is drained in Slurm with the first sentence that rejected it as
Slurm's reason, so no later job lands on it until an operator resumes it."""

from __future__ import annotations

from collections.abc import Callable, Collection

from pytest_gpucluster import slurm
from pytest_gpucluster.errors import GpuClusterError
from pytest_gpucluster.slurm.rights import DrainRight, refused_for_rights, right_needed
from pytest_gpucluster.verdict import Nodes


def drain_rejected(
    nodes: Nodes,
    *,
    executor: str,
    excluded: Collection[str] = (),
    drain: Callable[[str, str], None],
    right: DrainRight | None = None,
) -> dict[str, dict[str, str]]:
    """Drain each REJECTED node of ``nodes`` (the run's node verdicts) that this run
    tested: node → ``{"reason": ...}``, or ``{"error": ...}`` where Slurm refused. A node Slurm had
    excluded before the run keeps the reason it has; without Slurm (``executor`` local) nothing
    is drained. ``right``: what Slurm said before any job of this user's right to drain; where it
    said no, no drain is tried and each node's error is that sentence, and a refusal Slurm could
    not foretell names the right needed. ``drain(node, reason)`` drains one node (the run's
    ``slurm.drain``). The run's verdict never depends on it."""
    if executor != "slurm":
        return {}
    out: dict[str, dict[str, str]] = {}
    for judged in nodes.verdicts:
        node = judged.node
        if judged.verdict != "REJECTED" or node in excluded:
            continue
        if right is not None and right.allowed is False:
            out[node] = {"error": right.sentence}
            continue
        reason = slurm.drain_reason("rejected", (judged.reasons or ("acceptance failed",))[0])
        try:
            drain(node, reason)
            out[node] = {"reason": reason}
        except GpuClusterError as exc:
            said = str(exc)
            if refused_for_rights(said):
                said += f" ({right.sentence if right is not None and right.sentence else right_needed()})"
            out[node] = {"error": said}
    return out

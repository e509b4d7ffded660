"""Login side of the shared node probe (``workloads/node_probe.py``): once per run GPU health,
InfiniBand, the inventory and the vendor tools' presence are read on every node; each area takes
its part. When the plan has the intra-node NCCL job, the probe is that job's first phase
(``run.areas.nccl.probe_rides_along``); otherwise it is a job of its own, started ahead. If the
shared job fails, the probe is read again in a job of its own, so a broken collective does not
hide the GPU readings that may explain it.

If that job cannot run at all (a node offers fewer GPUs than the profile says, so Slurm cannot
place a job asking for all of them), an area that does not need GPUs may fall back to a job of
its own, so one fault does not hide the readings it does not touch.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import pytest

from pytest_gpucluster.errors import GpuClusterError, NodeLostError
from pytest_gpucluster.plan import jobs
from pytest_gpucluster.run.areas import nccl as nccl_checks
from pytest_gpucluster.workloads.node_probe import NodeProbe, PartError, probe_node

if TYPE_CHECKING:
    from pytest_gpucluster.run.context import JobContext as GpuClusterSession


def _probes(gc: GpuClusterSession) -> dict[str, NodeProbe]:
    def produce() -> dict[str, NodeProbe]:
        spec = gc.spec("node-probe", all_nodes=True)
        try:
            results = gc.run(probe_node, spec, shared_fs=gc.profile.shared_fs)
        except NodeLostError as exc:
            if not exc.answered:
                raise
            results = exc.answered  # type: ignore[assignment]  # the lost nodes' checks fail on their own
        return {r.value.node: r.value for r in results}

    if nccl_checks.probe_rides_along(gc):
        with contextlib.suppress(GpuClusterError):  # read again on its own below
            shared = nccl_checks.intra_node_job(gc).probes
            if shared is not None:
                return shared
    return gc.once(("node-probe",), produce, light=True)


Fallback = Callable[[], dict[str, Any]]


def start(gc: GpuClusterSession) -> None:
    """The probe's early start: its job of its own, when the plan starts it ahead."""
    readings(gc, "inventory")


# What a check reading the probe declares: the probe's request and its early start.
USES = pytest.mark.uses(jobs.NODE_PROBE, start=start)


def readings(gc: GpuClusterSession, part: str, *, fallback: Fallback | None = None) -> dict[str, Any]:
    """node → ``part``'s reading (a PartError where it raised on that node). When the probe job
    failed as a whole, ``fallback`` (once per run) produces the readings instead, if given."""
    try:
        probes = _probes(gc)
    except GpuClusterError:
        if fallback is None:
            raise
        return gc.once(("node-probe-fallback", part), fallback, light=True)
    return {node: probe.parts[part] for node, probe in probes.items() if part in probe.parts}


def absent_everywhere(gc: GpuClusterSession, tool: str) -> bool:
    """Whether the probe found ``tool`` on none of the tested nodes' PATH (so its check submits
    no job); False when any node has it, or the probe could not tell."""
    try:
        where = readings(gc, tool)
    except GpuClusterError:
        return False  # the probe job could not run: the tool's own job finds out for itself
    return bool(where) and set(where) >= set(gc.live_nodes) and all(path is None for path in where.values())


def good(found: Mapping[str, Any]) -> dict[str, Any]:
    """Only the nodes whose reading came back."""
    return {n: v for n, v in found.items() if v is not None and not isinstance(v, PartError)}


def reading_of(found: Mapping[str, Any], node: str, what: str) -> Any:
    """``node``'s reading, or the test fails saying why there is none."""
    value = found.get(node)
    if isinstance(value, PartError):
        pytest.fail(f"{node}: reading {what} failed there: {value.error}", pytrace=False)
    if value is None:
        answered = ", ".join(good(found)) or "none"
        pytest.fail(f"{node}: no {what} came back (nodes that answered: {answered})", pytrace=False)
    return value

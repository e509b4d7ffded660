"""The read-only look at a node that several areas share, one task per node in one job: GPU health
(NVML), InfiniBand ports (sysfs), the node inventory, the node's configuration settings
(``node_settings``), and where the vendor tools ``dcgmi``, ``nvbandwidth`` and ``ib_write_bw`` are
on the node's PATH (where none of the nodes has one, its check submits no job).

One job instead of four: on Slurm every job costs a pass of the scheduler (it starts batch jobs
on a one-second tick), a step launch and a Python start, about a second in all, which is more
than these reads take (the inventory's ~3 s aside). A part that raises does not hide the others:
its error comes back in its place, naming the part and the node.
"""

from __future__ import annotations

import shutil
import socket
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from pytest_gpucluster.workloads import gpu_health, infiniband, node_settings
from pytest_gpucluster.workloads.context import TaskContext
from pytest_gpucluster.workloads.inventory import node_inventory

PARTS = ("gpu_health", "infiniband", "inventory", "node_config", "dcgmi", "nvbandwidth", "ib_write_bw")


@dataclass(frozen=True)
class PartError:
    """A part that raised on a node instead of returning its reading."""

    part: str
    node: str
    error: str  # "ExceptionType: message"


@dataclass(frozen=True)
class NodeProbe:
    """Every part's reading (or PartError) of one node."""

    node: str
    parts: dict[str, Any] = field(default_factory=dict)


def probe_node(ctx: TaskContext, *, shared_fs: str | None = None, parts: Sequence[str] = PARTS) -> NodeProbe:
    """Workload, one task per node: read each part in turn."""
    node = ctx.hostname or socket.gethostname()
    readers: dict[str, Callable[[], Any]] = {
        "gpu_health": lambda: gpu_health.read_node(ctx),
        "infiniband": lambda: infiniband.read_node(ctx),
        "inventory": lambda: node_inventory(ctx, shared_fs=shared_fs),
        "node_config": lambda: node_settings.read_node(ctx),
        "dcgmi": lambda: shutil.which("dcgmi"),
        "nvbandwidth": lambda: shutil.which("nvbandwidth"),
        "ib_write_bw": lambda: shutil.which("ib_write_bw"),
    }
    unknown = [p for p in parts if p not in readers]
    if unknown:
        raise ValueError(f"unknown probe part(s) {', '.join(unknown)}; known: {', '.join(readers)}")
    out: dict[str, Any] = {}
    for part in parts:
        try:
            out[part] = readers[part]()
        except Exception as exc:  # one broken reading must not hide the others
            out[part] = PartError(part, node, f"{type(exc).__name__}: {exc}")
    return NodeProbe(node, out)

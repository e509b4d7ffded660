"""InfiniBand presence and link state on every node, read from sysfs (``checks.infiniband``
judges it on the login node):
``<root>/<device>/ports/<port>/{state,phys_state,rate,link_layer}``.

The sysfs root is a parameter so the same code reads fake trees in tests.
"""

from __future__ import annotations

import socket
from dataclasses import dataclass
from pathlib import Path

from pytest_gpucluster.workloads.context import TaskContext

SYSFS_ROOT = "/sys/class/infiniband"


@dataclass(frozen=True)
class IbPort:
    """One HCA port as sysfs describes it (text as read, e.g. ``4: ACTIVE``)."""

    device: str
    port: str
    state: str
    phys_state: str
    rate: str
    link_layer: str

    @property
    def rate_gbps(self) -> float | None:
        """``400 Gb/sec (4X NDR)`` → 400.0; None when unreadable."""
        try:
            return float(self.rate.split()[0])
        except (IndexError, ValueError):
            return None

    @property
    def active(self) -> bool:
        """Logical state ACTIVE and physical state LinkUp."""
        return _word(self.state) == "ACTIVE" and _word(self.phys_state) == "LINKUP"


def _word(text: str) -> str:
    # "4: ACTIVE" → "ACTIVE"; "5: LinkUp" → "LINKUP"
    return text.split(":", 1)[-1].strip().upper()


@dataclass(frozen=True)
class IbNode:
    """Every IB port one node has."""

    node: str
    root: str
    ports: tuple[IbPort, ...]
    error: str = ""


def _read(path: Path) -> str:
    try:
        return path.read_text().strip()
    except OSError:
        return "unreadable"


def read_ports(root: str = SYSFS_ROOT) -> tuple[IbPort, ...]:
    """Every port of every device under ``root`` (empty when ``root`` does not exist)."""
    base = Path(root)
    if not base.is_dir():
        return ()
    ports = []
    for device in sorted(base.iterdir(), key=lambda p: p.name):
        port_dir = device / "ports"
        if not port_dir.is_dir():
            continue
        for port in sorted(port_dir.iterdir(), key=lambda p: p.name):
            ports.append(
                IbPort(
                    device.name,
                    port.name,
                    _read(port / "state"),
                    _read(port / "phys_state"),
                    _read(port / "rate"),
                    _read(port / "link_layer"),
                )
            )
    return tuple(ports)


def read_node(ctx: TaskContext, *, root: str = SYSFS_ROOT) -> IbNode:
    """Run on each node: its IB ports."""
    node = ctx.hostname or socket.gethostname()
    try:
        return IbNode(node, root, read_ports(root))
    except OSError as exc:
        return IbNode(node, root, (), error=f"cannot read {root}: {exc}")

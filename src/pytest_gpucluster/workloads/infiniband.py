"""InfiniBand presence and link state on every node (seed 000, phase 5), read from sysfs:
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
            ports.append(IbPort(device.name, port.name, _read(port / "state"), _read(port / "phys_state"),
                                _read(port / "rate"), _read(port / "link_layer")))  # fmt: skip
    return tuple(ports)


def read_node(ctx: TaskContext, *, root: str = SYSFS_ROOT) -> IbNode:
    """Run on each node: its IB ports."""
    node = ctx.hostname or socket.gethostname()
    try:
        return IbNode(node, root, read_ports(root))
    except OSError as exc:
        return IbNode(node, root, (), error=f"cannot read {root}: {exc}")


def problems(n: IbNode, *, hcas: int, rate_gbps: float, link_layer: str) -> list[str]:
    """Expected HCA count with ``link_layer``; each of their ports ACTIVE/LinkUp at ``rate_gbps``
    or more. Devices of another link layer (an Ethernet NIC on the same driver) are not counted."""
    if n.error:
        return [f"{n.node}: {n.error}"]
    if hcas == 0:
        return []
    mine = [p for p in n.ports if p.link_layer.lower() == link_layer.lower()]
    others = sorted({f"{p.device} ({p.link_layer})" for p in n.ports if p not in mine})
    out = []
    devices = sorted({p.device for p in mine})
    if len(devices) < hcas:
        if not n.ports:
            found = f"no RDMA device under {n.root} (is the HCA driver, e.g. mlx5_ib, loaded?)"
        else:
            found = f"{len(devices)} {link_layer} HCA(s) ({', '.join(devices) or 'none'})"
            if others:
                found += f"; also {', '.join(others)}"
        out.append(f"{n.node}: {found}, expected {hcas}")
    for p in mine:
        where = f"{n.node}:{p.device}/{p.port}"
        if not p.active:
            out.append(f"{where}: state {p.state!r}, phys_state {p.phys_state!r}; expected ACTIVE / LinkUp")
        elif p.rate_gbps is None or p.rate_gbps < rate_gbps:
            out.append(f"{where}: rate {p.rate!r}, expected {rate_gbps:g} Gb/s")
    return out

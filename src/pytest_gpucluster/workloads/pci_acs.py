"""PCIe Access Control Services on the bridges above a node's GPUs and NICs, read from each
bridge's configuration space in sysfs (``/sys/bus/pci/devices/BDF/config``), and the NUMA node
of each of those GPUs and NICs.

ACS with P2P request or completion redirect set sends every peer-to-peer transfer (GPU↔NIC for
GPUDirect RDMA, GPU↔GPU over PCIe) up to the root complex: lower bandwidth, and on some platforms
hangs. The parser is pure (configuration bytes in, control bits out); the extended space past
256 bytes is readable by root only, so a task of another user reads ``readable=False``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

ACS_CAP_ID = 0x000D  # PCIe extended capability ID of ACS (PCI Express Base Specification, 7.7.8)
EXT_CAP_START = 0x100
ACS_BITS = {
    0x01: "SrcValid",
    0x02: "TransBlk",
    0x04: "ReqRedir",
    0x08: "CmpltRedir",
    0x10: "UpstreamFwd",
    0x20: "EgressCtrl",
    0x40: "DirectTrans",
}
REDIRECT_MASK = 0x04 | 0x08  # the bits that route peer-to-peer traffic through the root complex
NVIDIA, MELLANOX = "0x10de", "0x15b3"
_BDF = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")


@dataclass(frozen=True)
class Bridge:
    """One PCIe bridge above a GPU or NIC: its ACS control register (None: no ACS capability)."""

    bdf: str
    above: tuple[str, ...]  # "gpu 0000:18:00.0", "nic 0000:17:00.0"
    control: int | None


@dataclass(frozen=True)
class AcsReading:
    """The bridges above the node's GPUs and NICs; ``readable`` False where the extended
    configuration space could not be read (not root)."""

    devices: tuple[str, ...] = ()  # the GPUs and NICs found, as in ``Bridge.above``
    bridges: tuple[Bridge, ...] = ()
    readable: bool = True
    numa: dict[str, int] = field(default_factory=dict)  # device → its NUMA node (-1: none reported)


def acs_control(config: bytes) -> int | None:
    """The ACS control register of a device's configuration space, None if it has no ACS
    capability; raises ValueError when ``config`` stops before the extended space."""
    if len(config) <= EXT_CAP_START:
        raise ValueError(f"configuration space of {len(config)} bytes holds no extended capabilities")
    offset, seen = EXT_CAP_START, set()
    while offset and offset not in seen and offset + 8 <= len(config):
        seen.add(offset)
        header = int.from_bytes(config[offset : offset + 4], "little")
        if header in (0, 0xFFFFFFFF):
            return None
        if header & 0xFFFF == ACS_CAP_ID:
            return int.from_bytes(config[offset + 6 : offset + 8], "little")
        offset = (header >> 20) & 0xFFC
    return None


def describe(control: int) -> str:
    """``ReqRedir+ CmpltRedir+ ...`` for the bits set, as lspci prints ACSCtl."""
    return " ".join(f"{name}+" for bit, name in ACS_BITS.items() if control & bit) or "none"


def _kind(device: Path) -> str:
    def read(name: str) -> str:
        path = device / name
        return path.read_text().strip().lower() if path.is_file() else ""

    cls, vendor = read("class"), read("vendor")
    if vendor == NVIDIA and cls[:6] in ("0x0302", "0x0300"):
        return "gpu"
    if cls[:6] == "0x0207" or (vendor == MELLANOX and cls[:6] == "0x0200"):
        return "nic"
    return ""


def read(sys_root: Path) -> AcsReading:
    """Every bridge on the path from the root complex to each GPU and NIC of the node."""
    root = sys_root / "bus/pci/devices"
    if not root.is_dir():
        return AcsReading()
    above: dict[str, list[str]] = {}
    devices = []
    numa = {}
    for link in sorted(root.iterdir()):
        kind = _kind(link)
        if not kind:
            continue
        devices.append(f"{kind} {link.name}")
        node_file = link / "numa_node"
        numa[devices[-1]] = int(node_file.read_text()) if node_file.is_file() else -1
        for part in link.resolve().parent.parts:
            if _BDF.match(part):
                above.setdefault(part, []).append(f"{kind} {link.name}")
    bridges, readable = [], True
    for bdf, below in sorted(above.items()):
        try:
            control = acs_control((root / bdf / "config").read_bytes())
        except (OSError, ValueError):
            readable = False
            continue
        bridges.append(Bridge(bdf, tuple(below), control))
    return AcsReading(tuple(devices), tuple(bridges), readable, numa)

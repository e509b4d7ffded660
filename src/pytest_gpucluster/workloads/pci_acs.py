"""PCIe Access Control Services on the bridges above a node's GPUs and NICs, read from each
bridge's configuration space in sysfs (``/sys/bus/pci/devices/BDF/config``), and where each of
those GPUs and NICs sits: its NUMA node and the bridges between it and the root complex.

ACS with P2P request or completion redirect set sends every peer-to-peer transfer (GPU↔NIC for
GPUDirect RDMA, GPU↔GPU over PCIe) up to the root complex: lower bandwidth, and on some platforms
hangs. The parser is pure (configuration bytes in, control bits out). The kernel gives a reader
without CAP_SYS_ADMIN the first 64 bytes of a configuration space only, so a task of another user
than root reads no extended capability: each such bridge is kept as unread, with the reason, and
the bridges that were read are kept beside it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
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
# Why a bridge read short was not read: the kernel's pci_read_config gives a reader without
# CAP_SYS_ADMIN the first 64 bytes (128 of a CardBus bridge) of its 256 or 4096.
NOT_ROOT = "only the first 64 bytes of its configuration space are readable without CAP_SYS_ADMIN (root)"
_BDF = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")
_ROOT_BUS = re.compile(r"^pci[0-9a-f]{4}:[0-9a-f]{2}$")  # a host bridge's root bus in /sys/devices


@dataclass(frozen=True)
class Bridge:
    """One PCIe bridge above a GPU or NIC: its ACS control register (None: no ACS capability),
    or why it could not be read (``unread``)."""

    bdf: str
    above: tuple[str, ...]  # "gpu 0000:18:00.0", "nic 0000:17:00.0"
    control: int | None
    unread: str = ""  # NOT_ROOT, or the error that stopped the read; "" where it was read


@dataclass(frozen=True)
class PciDevice:
    """A GPU or NIC on PCIe: its address, its NUMA node and the path down to it from its root bus."""

    kind: str  # "gpu" or "nic"
    bdf: str
    numa_node: int = -1  # -1: the kernel reports none (a VM; firmware without NUMA information)
    path: tuple[str, ...] = ()  # its root bus ("pci0000:15") and every bridge below it, itself left out
    name: str = ""  # a NIC's RDMA device (mlx5_0), else its network interface; "" for a GPU

    @property
    def label(self) -> str:
        """``gpu 0000:18:00.0``, as ``Bridge.above`` names it."""
        return f"{self.kind} {self.bdf}"


@dataclass(frozen=True)
class AcsReading:
    """The node's GPUs and NICs on PCIe and the bridges above them."""

    devices: tuple[PciDevice, ...] = ()
    bridges: tuple[Bridge, ...] = ()

    @property
    def unread(self) -> tuple[Bridge, ...]:
        """The bridges whose ACS control could not be read."""
        return tuple(b for b in self.bridges if b.unread)


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


def _read(device: Path, name: str) -> str:
    path = device / name
    return path.read_text().strip().lower() if path.is_file() else ""


def _kind(device: Path) -> str:
    cls, vendor = _read(device, "class"), _read(device, "vendor")
    if vendor == NVIDIA and cls[:6] in ("0x0302", "0x0300"):
        return "gpu"
    if cls[:6] == "0x0207" or (vendor == MELLANOX and cls[:6] == "0x0200"):
        return "nic"
    return ""


def _nic_name(device: Path) -> str:
    for sub in ("infiniband", "net"):
        names = sorted(p.name for p in (device / sub).iterdir()) if (device / sub).is_dir() else []
        if names:
            return names[0]
    return ""


def _numa_node(device: Path) -> int:
    text = _read(device, "numa_node")
    return int(text) if text.lstrip("-").isdigit() else -1


def bridge(bdf: str, above: tuple[str, ...], config_path: Path) -> Bridge:
    """One bridge's ACS control from its configuration space file; a short read (not root) or a
    failed one is kept as unread, with why."""
    try:
        config = config_path.read_bytes()
    except OSError as exc:
        return Bridge(bdf, above, None, f"{type(exc).__name__}: {exc.strerror or exc}")
    if len(config) < EXT_CAP_START:
        return Bridge(bdf, above, None, NOT_ROOT)
    if len(config) == EXT_CAP_START:  # a conventional PCI bridge: no extended space, so no ACS
        return Bridge(bdf, above, None)
    return Bridge(bdf, above, acs_control(config))


def read(sys_root: Path) -> AcsReading:
    """Every GPU and NIC of the node, and every bridge on the path from the root complex to them."""
    root = sys_root / "bus/pci/devices"
    if not root.is_dir():
        return AcsReading()
    above: dict[str, list[str]] = {}
    devices = []
    for link in sorted(root.iterdir()):
        kind = _kind(link)
        if not kind:
            continue
        parts = link.resolve().parent.parts
        path = tuple(p for p in parts if _BDF.match(p) or _ROOT_BUS.match(p))
        found = PciDevice(kind, link.name, _numa_node(link), path, _nic_name(link) if kind == "nic" else "")
        devices.append(found)
        for part in path:
            if _BDF.match(part):
                above.setdefault(part, []).append(found.label)
    bridges = tuple(bridge(bdf, tuple(below), root / bdf / "config") for bdf, below in sorted(above.items()))
    return AcsReading(tuple(devices), bridges)

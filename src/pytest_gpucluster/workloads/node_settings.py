"""The node's configuration as a Slurm task sees it, read once per node in the node probe: the
task's own resource limits, swap, the CPU frequency governors, the kernel modules and interfaces
GPUDirect RDMA and NCCL depend on, whether the node is a virtual machine, the PCIe ACS control of
the bridges above its GPUs and NICs (``pci_acs``) and the GPUs' NVML modes (``gpu_modes``).

Read-only and quick (a few hundred small sysfs/procfs reads); nothing is judged here
(``checks.node_config`` judges on the login node). The parsers are pure and unit-tested on
recorded files.
"""

from __future__ import annotations

import os
import socket
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from pytest_gpucluster.workloads import gpu_modes, pci_acs
from pytest_gpucluster.workloads.context import TaskContext

T = TypeVar("T")

# /proc/self/limits rows the checks read, by the names the kernel prints.
LIMIT_ROWS = {"memlock": "Max locked memory", "nofile": "Max open files"}
# Modules that give GPUDirect RDMA its peer-memory path (the in-tree one, and MLNX_OFED's older one).
PEERMEM_MODULES = ("nvidia_peermem", "nv_peer_mem")
ARPHRD_INFINIBAND = 32  # /sys/class/net/IF/type of an IPoIB interface (include/uapi/linux/if_arp.h)
# What ``NodeSettings.errors`` calls the reading of the PCIe devices (pci_acs) where it failed.
PCI_READING = "PCIe ACS"


@dataclass(frozen=True)
class Limit:
    """One resource limit of the task: soft and hard, ``None`` for unlimited."""

    soft: int | None
    hard: int | None


@dataclass(frozen=True)
class Interface:
    """One network interface of the node: its MTU, whether it is IPoIB, and the RDMA device port
    it is the network device of, with that port's link layer (``Ethernet``: RoCE)."""

    name: str
    mtu: int
    infiniband: bool = False
    rdma_port: str = ""  # "mlx5_0 port 1" ("mlx5_0" where the port is not known), "" for none
    link_layer: str = ""  # "Ethernet" (RoCE) or "InfiniBand", as the RDMA port reports it

    @property
    def roce(self) -> bool:
        """The interface carries an RDMA device's RoCE traffic: its MTU sets RoCE's path MTU."""
        return self.link_layer == "Ethernet" and bool(self.rdma_port)


@dataclass(frozen=True)
class NodeSettings:
    """A node's settings; ``None`` (or empty) where the node has nothing to read."""

    node: str
    limits: dict[str, Limit] = field(default_factory=dict)  # "memlock" (bytes), "nofile" (files)
    swap_total_bytes: int | None = None
    governors: dict[str, int] = field(default_factory=dict)  # governor → CPUs using it; {} without cpufreq
    peermem_module: str = ""  # the peer-memory module loaded, "" for none
    nvidia_open_module: bool = False  # the NVIDIA driver is the open kernel module (dma-buf capable)
    kernel: str = ""
    rdma_devices: tuple[str, ...] = ()  # /sys/class/infiniband entries
    interfaces: tuple[Interface, ...] = ()
    virtual_machine: str = ""  # why the node reads as a VM ("hypervisor CPU flag"), "" on bare metal
    acs: pci_acs.AcsReading = field(default_factory=pci_acs.AcsReading)
    gpus: gpu_modes.GpuModes = field(default_factory=gpu_modes.GpuModes)
    errors: tuple[str, ...] = ()  # a reading that failed: "what: ExceptionType: message"


def parse_limits(text: str) -> dict[str, Limit]:
    """``/proc/self/limits`` → the rows of ``LIMIT_ROWS`` ("unlimited" → None)."""

    def value(word: str) -> int | None:
        return None if word == "unlimited" else int(word)

    out: dict[str, Limit] = {}
    for key, title in LIMIT_ROWS.items():
        for line in text.splitlines():
            if line.startswith(title):
                words = line[len(title) :].split()
                out[key] = Limit(value(words[0]), value(words[1]))
    return out


def parse_swap_total(meminfo: str) -> int | None:
    """``/proc/meminfo``'s SwapTotal in bytes (the kernel prints kB = KiB), None if absent."""
    for line in meminfo.splitlines():
        if line.startswith("SwapTotal:"):
            return int(line.split()[1]) * 1024
    return None


def read_governors(sys_root: Path) -> dict[str, int]:
    """Each CPU's scaling governor, counted; {} where the kernel exposes no cpufreq."""
    found: Counter[str] = Counter()
    for path in sorted((sys_root / "devices/system/cpu").glob("cpu[0-9]*/cpufreq/scaling_governor")):
        found[path.read_text().strip()] += 1
    return dict(found)


def _port_netdevs(port: Path) -> list[str]:
    """The network devices a port's GID table names (``gid_attrs/ndevs/N``); an unused entry
    reads as an error (EINVAL) and names none."""
    names: dict[str, None] = {}
    for entry in sorted(port.glob("gid_attrs/ndevs/*"), key=lambda p: int(p.name) if p.name.isdigit() else 0):
        try:
            name = entry.read_text().strip()
        except OSError:
            continue
        if name:
            names[name] = None
    return list(names)


def rdma_netdevs(sys_root: Path) -> dict[str, tuple[str, str]]:
    """network interface → (the RDMA device port it serves, that port's link layer), from
    /sys/class/infiniband: each port's GID table (which names a bond, not its members), else the
    interfaces of the device's PCI function (``device/net``)."""
    out: dict[str, tuple[str, str]] = {}
    root = sys_root / "class/infiniband"
    for dev in sorted(root.iterdir()) if root.is_dir() else []:
        layers: dict[str, str] = {}
        for port in sorted((dev / "ports").iterdir()) if (dev / "ports").is_dir() else []:
            layer = _text(port / "link_layer").strip()
            layers[port.name] = layer
            for name in _port_netdevs(port):
                out.setdefault(name, (f"{dev.name} port {port.name}", layer))
        if any(where.startswith(f"{dev.name} ") for where, _ in out.values()):
            continue
        where = f"{dev.name} port {next(iter(layers))}" if len(layers) == 1 else dev.name
        layer = next(iter(set(layers.values()))) if len(set(layers.values())) == 1 else ""
        for net in sorted((dev / "device/net").iterdir()) if (dev / "device/net").is_dir() else []:
            out.setdefault(net.name, (where, layer))
    return out


def read_interfaces(sys_root: Path) -> tuple[Interface, ...]:
    """Every network interface but loopback, with its MTU and the RDMA port it serves."""
    rdma = rdma_netdevs(sys_root)
    out = []
    for path in sorted((sys_root / "class/net").iterdir()) if (sys_root / "class/net").is_dir() else []:
        if path.name == "lo" or not (path / "mtu").is_file():
            continue
        kind = (path / "type").read_text().strip() if (path / "type").is_file() else ""
        port, layer = rdma.get(path.name, ("", ""))
        out.append(Interface(path.name, int((path / "mtu").read_text()), kind == str(ARPHRD_INFINIBAND), port, layer))
    return tuple(out)


def virtual_machine(cpuinfo: str, sys_root: Path) -> str:
    """Why this node is a virtual machine, or "" when nothing says so."""
    for line in cpuinfo.splitlines():
        if line.startswith("flags") and "hypervisor" in line.split(":", 1)[-1].split():
            return "the CPU reports the hypervisor flag"
    hv = sys_root / "hypervisor/type"
    if hv.is_file() and hv.read_text().strip():
        return f"{hv} is {hv.read_text().strip()!r}"
    return ""


def _text(path: Path) -> str:
    return path.read_text(errors="replace") if path.is_file() else ""


def read_node(ctx: TaskContext, *, sys_root: str = "/sys", proc_root: str = "/proc") -> NodeSettings:
    """Workload part: this node's settings as this task sees them."""
    node = ctx.hostname or socket.gethostname()
    sys_p, proc_p = Path(sys_root), Path(proc_root)
    errors: list[str] = []

    def attempt(what: str, read: Callable[[], T], default: T) -> T:
        try:
            return read()
        except Exception as exc:  # one unreadable setting must not hide the others
            errors.append(f"{what}: {type(exc).__name__}: {exc}")
            return default

    infiniband = sys_p / "class/infiniband"
    return NodeSettings(
        node=node,
        limits=attempt("limits", lambda: parse_limits((proc_p / "self/limits").read_text()), {}),
        swap_total_bytes=attempt("swap", lambda: parse_swap_total((proc_p / "meminfo").read_text()), None),
        governors=attempt("cpu governors", lambda: read_governors(sys_p), {}),
        peermem_module=next((m for m in PEERMEM_MODULES if (sys_p / "module" / m).is_dir()), ""),
        nvidia_open_module="Open Kernel Module" in _text(proc_p / "driver/nvidia/version"),
        kernel=os.uname().release,
        rdma_devices=tuple(sorted(p.name for p in infiniband.iterdir())) if infiniband.is_dir() else (),
        interfaces=attempt("interfaces", lambda: read_interfaces(sys_p), ()),
        virtual_machine=attempt("virtualisation", lambda: virtual_machine(_text(proc_p / "cpuinfo"), sys_p), ""),
        acs=attempt(PCI_READING, lambda: pci_acs.read(sys_p), pci_acs.AcsReading()),
        gpus=gpu_modes.read(),
        errors=tuple(errors),
    )

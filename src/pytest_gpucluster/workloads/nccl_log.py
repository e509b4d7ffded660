"""What NCCL's own INFO lines (``NCCL_DEBUG=INFO``) say about a process's communicators: NCCL's
version, the network module, the transports its channels use and, for the network, which device
(NIC and port) each GPU sent and received through, and whether GPUDirect RDMA was on. Pure.

The lines read, as NCCL 2.x prints them (subsystems INIT and NET; ``src/transport/net.cc``,
``net_ib``, ``net_socket.cc`` and ``graph/topo.cc`` of NVIDIA/nccl):

* ``NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_3:1/RoCE [RO]; OOB eth0:10.0.0.1<0>``: the devices of
  the IB module, each ``[index]name:port/link layer`` (a rail or plane id may follow the port);
  ``NET/Socket : Using [0]eth0:10.0.0.1<0>``: the socket module's interfaces;
* ``NET/IB : GPU Direct RDMA Enabled for HCA 0 'mlx5_0'``: whether a device can take GPU memory;
* ``NET/IB : No device found.`` and ``Failed to initialize NET plugin IB``: no RDMA device;
* ``Channel 02/0 : 0[0] -> 8[0] [send] via NET/IB/3(1)/GDRDMA``: one channel's connection, from
  this rank's side, through device 3 (the ``(1)``: sent through rank 1's NIC, PXN) with GPUDirect
  RDMA. The device number is the index of the ``Using`` list above, so a channel's NIC is named
  from the same process's log.

Each line starts with ``host:pid:tid [cudaDev]``: a process that drives several GPUs (nccl-tests
``-g``) logs each GPU's channels under that GPU's device number.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Literal

Direction = Literal["send", "receive"]

_VERSION = re.compile(r"NCCL INFO NCCL version (\d+\.\d+\.\d+)")
_NETWORK = re.compile(r"NCCL INFO Using network (.+?)\s*$")
_CHANNEL = re.compile(r"NCCL INFO Channel \d+(?:/\d+)? : .* via (\S+)")
_NVLS = re.compile(r"NCCL INFO NVLS comm ")
_DEVICE_NUMBER = re.compile(r"\d+(?:\(\d+\))?")  # NET/IB/3(1)/GDRDMA: the NIC (and its PXN proxy)

_CUDA_DEV = re.compile(r"(?:^|\s)[^\s:]+:\d+:\d+ \[(\d+)\] NCCL INFO ")
_USING = re.compile(r"NCCL INFO NET/(.+?) : Using(.*?)(?:; OOB (\S+))?\s*$")
_ITEM = re.compile(r"\[(\d+)\](\S+)")
_HCA = re.compile(r"([^\s:]+):(\d+)(?::\d*)?(?::\d+)?/(\w+)")  # mlx5_0:1/IB, mlx5_0:1:2/IB, mlx5_0:1::0/IB
_GDR = re.compile(r"NCCL INFO NET/(.+?) : GPU Direct RDMA (Enabled|Disabled) for HCA (\d+) '([^']*)'")
_NO_DEVICE = re.compile(r"NCCL INFO NET/IB : No device found")
_FAILED = re.compile(r"NCCL INFO Failed to initialize NET plugin (\S+)")
_NET_CHANNEL = re.compile(
    r"NCCL INFO Channel (\d+)(?:/\d+)? : (\d+)\[[0-9a-fA-F]+\] -> (\d+)\[[0-9a-fA-F]+\] "
    r"\[(send|receive)\] via NET/(.+?)/(\d+)(?:\((\d+)\))?(/GDRDMA)?"
)


@dataclass(frozen=True)
class NetDevice:
    """One device a network module of NCCL lists as it starts: an HCA's port (IB, RoCE) or a
    network interface (sockets)."""

    net: str  # the module: "IB", "Socket", a plugin's name
    index: int  # what a channel's ``via NET/<net>/<index>`` names
    name: str  # "mlx5_0", "eth0"
    port: int | None = None  # the HCA's port; None for a network interface
    link_layer: str = ""  # "IB" or "RoCE"; empty for a network interface
    address: str = ""  # a network interface's address, as NCCL prints it
    gdr: bool | None = None  # NCCL's "GPU Direct RDMA Enabled/Disabled for HCA"; None: not said

    @property
    def label(self) -> str:
        """How a finding's ``port`` names it: ``mlx5_0/1``, ``eth0``."""
        return f"{self.name}/{self.port}" if self.port is not None else self.name


@dataclass(frozen=True)
class NetChannel:
    """One channel's connection through the network, from the side of the rank that logged it."""

    channel: int
    rank: int  # this rank, in the communicator the channel belongs to
    peer: int
    direction: Direction
    net: str
    device: int  # the index of the NIC in the module's device list
    proxy: int | None = None  # PXN: the rank (on this node) whose NIC carries this rank's send
    gdr: bool = False  # ``/GDRDMA``: the NIC reads or writes the GPU's memory directly
    cuda_dev: int | None = None  # the CUDA device of the thread that logged it


@dataclass(frozen=True)
class NcclLog:
    """What a process's NCCL INFO lines say about its communicators."""

    version: str | None = None
    network: str | None = None
    transports: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()  # NCCL WARN lines, to be kept in the job's log
    devices: tuple[NetDevice, ...] = ()
    channels: tuple[NetChannel, ...] = ()  # the connections through the network
    rdma_found: bool | None = None  # False: "NET/IB : No device found."; True: IB listed devices
    nets_failed: tuple[str, ...] = ()  # network modules NCCL could not start ("IB")


@dataclass(frozen=True)
class NicUse:
    """One NIC a GPU's network channels went through, with the device's facts from the same log."""

    net: str
    index: int
    name: str  # empty where the log has no device list (NCCL started its network before it)
    port: int | None
    link_layer: str
    directions: tuple[Direction, ...]  # "receive", "send"
    gdr: tuple[Direction, ...]  # the directions that used GPUDirect RDMA
    proxied: bool = False  # some sends went through another GPU's NIC of the node (PXN)

    @property
    def label(self) -> str:
        """How a finding's ``port`` names it: ``mlx5_0/1``, ``eth0``, ``IB device 3``."""
        if not self.name:
            return f"{self.net} device {self.index}"
        return f"{self.name}/{self.port}" if self.port is not None else self.name

    @property
    def gdr_state(self) -> str:
        """``on`` (every direction used), ``off`` (none), or the directions that did."""
        if not self.gdr:
            return "off"
        if set(self.gdr) >= set(self.directions):
            return "on"
        return f"on for {' and '.join(self.gdr)} only"


@dataclass(frozen=True)
class GpuNics:
    """One rank's GPU and how NCCL reached the network from it, from that rank's own log."""

    node: str
    gpu: int
    network: str | None  # the module its communicators used: "IB", "Socket"
    nics: tuple[NicUse, ...]
    rdma_found: bool | None = None  # False: NCCL's IB module found no device on the node
    nets_failed: tuple[str, ...] = ()


def transport_of(via: str) -> str:
    """A channel's ``via`` field without device numbers: ``NET/IB/0/GDRDMA`` → ``NET/IB/GDRDMA``."""
    parts = via.split("/")
    if parts[0] == "NET" and len(parts) > 1:
        return "/".join([parts[0], parts[1], *(p for p in parts[2:] if not _DEVICE_NUMBER.fullmatch(p))])
    return via


def _devices(line: str) -> list[NetDevice]:
    """The devices of a ``NET/<net> : Using ...`` line."""
    m = _USING.search(line)
    if m is None:
        return []
    net, found = m.group(1), []
    for index, item in _ITEM.findall(m.group(2)):
        hca = _HCA.fullmatch(item)
        if hca:
            found.append(NetDevice(net, int(index), hca.group(1), int(hca.group(2)), hca.group(3)))
        else:
            name, _, address = item.partition(":")
            found.append(NetDevice(net, int(index), name, address=address))
    return found


def parse_nccl_log(text: str) -> NcclLog:
    """NCCL's version, network, the transports its channels use (sorted, network links first),
    the network's devices and each connection through them, from ``NCCL_DEBUG=INFO`` output
    (subsystems INIT and NET; INIT alone lacks the devices' GPUDirect RDMA lines)."""
    version = network = None
    transports: set[str] = set()
    warnings: list[str] = []
    devices: dict[tuple[str, int], NetDevice] = {}
    gdr: dict[tuple[str, int], bool] = {}
    channels: list[NetChannel] = []
    rdma_found: bool | None = None
    failed: list[str] = []
    for line in text.splitlines():
        if m := _CHANNEL.search(line):
            transports.add(transport_of(m.group(1)))
            if n := _NET_CHANNEL.search(line):
                dev = _CUDA_DEV.search(line)
                channels.append(
                    NetChannel(
                        channel=int(n.group(1)),
                        rank=int(n.group(2) if n.group(4) == "send" else n.group(3)),
                        peer=int(n.group(3) if n.group(4) == "send" else n.group(2)),
                        direction="send" if n.group(4) == "send" else "receive",
                        net=n.group(5),
                        device=int(n.group(6)),
                        proxy=int(n.group(7)) if n.group(7) else None,
                        gdr=bool(n.group(8)),
                        cuda_dev=int(dev.group(1)) if dev else None,
                    )
                )
        elif m := _VERSION.search(line):
            version = m.group(1)
        elif m := _NETWORK.search(line):
            network = m.group(1)
        elif _NVLS.search(line):
            transports.add("NVLS")
        elif m := _GDR.search(line):
            gdr[(m.group(1), int(m.group(3)))] = m.group(2) == "Enabled"
        elif _NO_DEVICE.search(line):
            rdma_found = False
        elif m := _FAILED.search(line):
            failed.append(m.group(1))
        elif "NCCL WARN" in line:
            warnings.append(line.strip())
        else:
            for d in _devices(line):
                devices.setdefault((d.net, d.index), d)
                rdma_found = True if d.net == "IB" else rdma_found
    listed = tuple(replace(d, gdr=gdr.get(key)) for key, d in sorted(devices.items()))
    return NcclLog(
        version,
        network,
        _ordered(transports),
        tuple(warnings),
        listed,
        tuple(channels),
        rdma_found,
        tuple(dict.fromkeys(failed)),
    )


def _ordered(transports: Iterable[str]) -> tuple[str, ...]:
    return tuple(sorted(set(transports), key=lambda t: (not t.startswith("NET/"), t)))


def parse_from(data: bytes, start: int) -> NcclLog:
    """The log of a communicator connected from byte ``start`` of its process's log on: its
    channels, transports and warnings from there, with the network's devices and their state
    from the whole log (NCCL lists them once per process, when its first communicator starts)."""
    whole = parse_nccl_log(data.decode("utf-8", errors="replace"))
    mine = parse_nccl_log(data[start:].decode("utf-8", errors="replace"))
    return replace(mine, devices=whole.devices, rdma_found=whole.rdma_found, nets_failed=whole.nets_failed)


def nics_of(log: NcclLog, node: str, gpu: int, *, cuda_dev: int | None = None) -> GpuNics:
    """The NICs one GPU's network channels went through: every channel of ``log`` (a process of
    one GPU), or those its thread of CUDA device ``cuda_dev`` logged; each NIC named from the
    device list of the same log."""
    listed = {(d.net, d.index): d for d in log.devices}
    used: dict[tuple[str, int], list[NetChannel]] = {}
    for c in log.channels:
        if cuda_dev is None or c.cuda_dev == cuda_dev:
            used.setdefault((c.net, c.device), []).append(c)
    nics = []
    for key, through in sorted(used.items()):
        d = listed.get(key)
        directions = tuple(sorted({c.direction for c in through}, reverse=True))  # send, receive
        nics.append(
            NicUse(
                net=key[0],
                index=key[1],
                name=d.name if d else "",
                port=d.port if d else None,
                link_layer=d.link_layer if d else "",
                directions=directions,
                gdr=tuple(x for x in directions if any(c.gdr for c in through if c.direction == x)),
                proxied=any(c.proxy is not None for c in through),
            )
        )
    return GpuNics(node, gpu, log.network, tuple(nics), log.rdma_found, log.nets_failed)


def nccl_debug_file(env: Mapping[str, str], pid: int, hostname: str) -> str | None:
    """The file this process's NCCL writes its INFO lines to (``NCCL_DEBUG_FILE`` with ``%h`` the
    host name up to its first dot and ``%p`` the pid, as NCCL expands them), or None when NCCL
    writes no INFO lines to a file."""
    path = env.get("NCCL_DEBUG_FILE")
    if not path or env.get("NCCL_DEBUG", "").upper() not in ("INFO", "TRACE"):
        return None
    expanded = {"h": hostname.split(".")[0], "p": str(pid), "%": "%"}
    return re.sub(r"%(.)", lambda m: expanded.get(m.group(1), m.group(0)), path)


def merge_logs(logs: Iterable[NcclLog]) -> NcclLog:
    """Several ranks' logs as one: every transport any of them used; the first version and network."""
    logs = list(logs)
    return NcclLog(
        version=next((log.version for log in logs if log.version), None),
        network=next((log.network for log in logs if log.network), None),
        transports=_ordered(t for log in logs for t in log.transports),
    )

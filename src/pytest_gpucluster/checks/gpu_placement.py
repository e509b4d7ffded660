"""Where each GPU of a node sits, judged on the login node: its NUMA node and its nearest NIC, GPU
by GPU (by NVML's index), against the layout the profile states (``node_config.gpu_numa_nodes``,
``node_config.gpu_nics``) or else against the majority of the tested nodes.

The nearest NIC is the one below the deepest PCIe bridge the GPU is below too (the switch both
hang from), else below its host bridge, else on its NUMA node: the PCIe distance by which NCCL
pairs a GPU with a NIC. A GPU on another NUMA node than on its peers, or nearest another NIC,
sends its host copies and GPUDirect RDMA traffic across the sockets or through another rail.
Where the nodes disagree with no majority, the split is a warning naming every node, none
convicted; where the kernel reports no NUMA node and the node has no NIC, nothing is placed."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from pytest_gpucluster.checks.node_config import Judged, setting
from pytest_gpucluster.config.node_config import NodeConfig
from pytest_gpucluster.verdict import Finding, hostlist
from pytest_gpucluster.workloads.node_settings import PCI_READING, NodeSettings
from pytest_gpucluster.workloads.pci_acs import PciDevice

NO_NIC_NEAR = "none near"


@dataclass(frozen=True)
class GpuPlacement:
    """One GPU's place on its node."""

    index: int  # NVML's index (nvidia-smi's); the GPU's place in PCI order where NVML gave no bus id
    bdf: str
    numa_node: int | None  # None: the kernel reports none
    nic: str | None  # the nearest NIC's name (its address where it has none); NO_NIC_NEAR; None: no NIC
    nic_numa_node: int | None = None
    via: str = ""  # what GPU and NIC share: "PCIe bridge 0000:16:00.0", "host bridge pci0000:15", "NUMA node 0"


def _shared(a: PciDevice, b: PciDevice) -> int:
    depth = 0
    for mine, theirs in zip(a.path, b.path, strict=False):
        if mine != theirs:
            break
        depth += 1
    return depth


def _numa(value: int) -> int | None:
    return value if value >= 0 else None


def nearest_nic(gpu: PciDevice, nics: Sequence[PciDevice]) -> tuple[PciDevice | None, str]:
    """The NIC nearest ``gpu`` and what they share; (None, "") where no NIC shares a bridge,
    a host bridge or the NUMA node with it. Among NICs as near, the first by address."""

    def same_numa(nic: PciDevice) -> bool:
        return gpu.numa_node >= 0 and nic.numa_node == gpu.numa_node

    ranked = sorted(nics, key=lambda n: (-_shared(gpu, n), not same_numa(n), n.bdf))
    if not ranked:
        return None, ""
    best = ranked[0]
    depth = _shared(gpu, best)
    if depth > 1:
        return best, f"PCIe bridge {gpu.path[depth - 1]}"
    if depth == 1:
        return best, f"host bridge {gpu.path[0]}"
    if same_numa(best):
        return best, f"NUMA node {gpu.numa_node}"
    return None, ""


def placements(s: NodeSettings) -> tuple[GpuPlacement, ...]:
    """Every GPU of the node on PCIe, placed. NVML's bus ids give each its index (and leave out
    the GPUs of another node sharing the machine); without them, the PCI order does, as NVML
    numbers GPUs."""
    gpus = sorted((d for d in s.acs.devices if d.kind == "gpu"), key=lambda d: d.bdf)
    nics = [d for d in s.acs.devices if d.kind == "nic"]
    index_of = {g.pci_bus_id: g.index for g in s.gpus.gpus if g.pci_bus_id}
    out = []
    for position, gpu in enumerate(gpus):
        if index_of and gpu.bdf not in index_of:
            continue
        nic, via = nearest_nic(gpu, nics)
        name = (nic.name or nic.bdf) if nic else (NO_NIC_NEAR if nics else None)
        out.append(
            GpuPlacement(
                index_of.get(gpu.bdf, position),
                gpu.bdf,
                _numa(gpu.numa_node),
                name,
                _numa(nic.numa_node) if nic else None,
                via,
            )
        )
    return tuple(sorted(out, key=lambda p: p.index))


@dataclass(frozen=True)
class _Fact:
    """One thing judged of each GPU's place."""

    setting: str
    noun: str  # as the sentence names it: "NUMA node"
    key: str  # the profile's node_config key that states it
    of: Callable[[GpuPlacement], str | None]  # its value as text; None where the node does not tell
    detail: Callable[[GpuPlacement], str]  # what the sentence adds to the node's own value
    unknown: str  # why a node may not tell it
    why: str
    remedy: str

    def shown(self, p: GpuPlacement) -> str:
        """``NUMA node 0``, ``nearest NIC mlx5_0 (through PCIe bridge 0000:16:00.0)``."""
        return f"{self.noun} {self.of(p)}{self.detail(p)}"


_FACTS = (
    _Fact(
        "GPU NUMA node",
        "NUMA node",
        "gpu_numa_nodes",
        lambda p: None if p.numa_node is None else str(p.numa_node),
        lambda p: "",
        "the kernel reports no NUMA node for the GPU (numa_node -1)",
        "a job that places this GPU's rank as on its peers binds it to CPUs, memory and a NIC of the other "
        "socket, so its host copies and GPUDirect RDMA traffic cross the link between the sockets",
        "check the GPU's slot and riser against the server's slot map, and the BIOS's NUMA settings (NUMA "
        "nodes per socket, sub-NUMA clustering) against the other nodes'; where this layout is intended, "
        "state it in the profile's node_config.gpu_numa_nodes",
    ),
    _Fact(
        "GPU's nearest NIC",
        "nearest NIC",
        "gpu_nics",
        lambda p: p.nic,
        lambda p: f" (through {p.via})" if p.via else "",
        "the node has no RDMA NIC on PCIe",
        "NCCL sends this GPU's traffic between nodes through its nearest NIC: through another NIC than on its "
        "peers, it shares a rail with another GPU's traffic or crosses to another PCIe switch or socket, and "
        "GPUDirect RDMA slows",
        "check which slots the GPU and the NICs sit in and their cabling against the server's slot map, and "
        "that every NIC's RDMA driver is bound and names it as on the other nodes (mlx5_N follow the order "
        "the driver finds the NICs); where this layout is intended, state it in the profile's node_config.gpu_nics",
    ),
)


# Each node's check compares it with every node: each node's reading is placed once per process
# (keyed by the reading itself, which the run's node probe keeps for the whole run), not once per
# node's check, so a run of N nodes places N readings, not N².
_PLACED: dict[int, tuple[NodeSettings, dict[int, GpuPlacement]]] = {}


def _placed_once(s: NodeSettings) -> dict[int, GpuPlacement]:
    hit = _PLACED.get(id(s))
    if hit is None or hit[0] is not s:
        hit = _PLACED[id(s)] = (s, {p.index: p for p in placements(s)})
    return hit[1]


def _placed(all_nodes: Mapping[str, NodeSettings]) -> dict[str, dict[int, GpuPlacement]]:
    return {n: _placed_once(s) for n, s in all_nodes.items()}


def _against(
    node: str, p: GpuPlacement, fact: _Fact, cfg: NodeConfig, placed: Mapping[str, Mapping[int, GpuPlacement]]
) -> tuple[bool, Finding | None]:
    """Whether ``fact`` of GPU ``p`` was judged, and the finding where it differs: from the
    profile's value, else from a strict majority of the nodes that report it (a failure); a
    warning naming the split where the nodes have no majority; not judged where the profile
    states it and the node cannot show it."""
    mine = fact.of(p)
    where = f"{node}:gpu{p.index}"
    stated = {"gpu_numa_nodes": cfg.gpu_numa_nodes, "gpu_nics": cfg.gpu_nics}[fact.key].get(str(p.index))
    if mine is None:
        if stated is None:
            return False, None
        text = (
            f"{where}: {fact.noun} not judged: {fact.unknown}, so the profile's node_config.{fact.key} ({stated}) "
            "has nothing to be compared with"
        )
        return True, Finding.on_node(node, text, gpu=p.index, severity="not_judged")
    if stated is not None:
        expected, source = str(stated), f"the profile's node_config.{fact.key}"
    else:
        peers = {n: fact.of(gpus[p.index]) for n, gpus in placed.items() if p.index in gpus}
        seen = {n: v for n, v in peers.items() if v is not None}
        if len(seen) < 2:
            return False, None
        counts = Counter(seen.values())
        expected, count = counts.most_common(1)[0]
        if count * 2 <= len(seen):
            split = "; ".join(
                f"{value} on {hostlist([n for n, v in seen.items() if v == value])}"
                for value, _ in counts.most_common()
            )
            text = (
                f"{where}: {fact.shown(p)}, and the nodes differ on gpu{p.index}'s {fact.noun} with no majority: "
                f"{split}. State the intended layout in the profile's node_config.{fact.key} to judge it"
            )
            return True, Finding.across([node, *sorted(seen)], text, severity="warn")
        source = f"{count} of {len(seen)} nodes"
    if mine == expected:
        return True, None
    text = f"{where}: {fact.shown(p)}, expected {expected} ({source}): {fact.why}"
    found = f"{mine}{fact.detail(p)}"
    return True, setting(
        node, fact.setting, text, found=found, expected=f"{expected} ({source})", remedy=fact.remedy, gpu=p.index
    )


def _no_nic_on_its_numa_node(node: str, p: GpuPlacement, nics_on: Sequence[int]) -> Finding:
    found = f"none on NUMA node {p.numa_node}; NICs on {', '.join(str(n) for n in nics_on)}"
    text = (
        f"{node}:gpu{p.index}: no NIC on its NUMA node {p.numa_node} (the node's NICs are on NUMA node "
        f"{', '.join(str(n) for n in nics_on)}): its GPUDirect RDMA traffic crosses the link between the sockets"
    )
    remedy = "put a NIC in a slot of that socket (the server's slot map), or check the BIOS's NUMA-per-socket setting"
    return setting(
        node,
        "GPU's nearest NIC",
        text,
        found=found,
        expected="a NIC on the GPU's NUMA node",
        remedy=remedy,
        gpu=p.index,
        severity="warn",
    )


def gpu_placement(all_nodes: Mapping[str, NodeSettings], node: str, cfg: NodeConfig) -> Judged:
    """Each GPU's NUMA node and nearest NIC as the profile states them, else as on a strict
    majority of the nodes (a failure where it differs; a warning where the nodes split with no
    majority); a GPU with no NIC on its NUMA node is a warning whatever the others have. Not
    applicable where there is nothing to place the GPUs by, or nothing to compare with."""
    s = all_nodes[node]
    failed = [e for e in s.errors if e.startswith(f"{PCI_READING}:")]
    if failed:
        text = f"{node}: the GPUs' PCIe placement could not be read ({'; '.join(failed)})"
        return Judged((Finding.on_node(node, text, severity="not_judged"),))
    placed = _placed(all_nodes)
    mine = placed[node]
    if not mine:
        return Judged(not_applicable=f"{node}: no GPU on PCIe to place")
    stated = bool(cfg.gpu_numa_nodes or cfg.gpu_nics)
    if not stated and all(p.numa_node is None and p.nic is None for p in mine.values()):
        return Judged(
            not_applicable=f"{node}: nothing to place the GPUs by: the kernel reports no NUMA node for them "
            f"(numa_node -1{', ' + s.virtual_machine if s.virtual_machine else ''}) and the node has no RDMA NIC "
            "on PCIe"
        )
    nics_on = sorted({d.numa_node for d in s.acs.devices if d.kind == "nic" and d.numa_node >= 0})
    out: list[Finding] = []
    compared = False
    for p in mine.values():
        for fact in _FACTS:
            judged, finding = _against(node, p, fact, cfg, placed)
            compared |= judged
            if finding is not None:
                out.append(finding)
        if p.numa_node is not None and nics_on:
            compared = True
            if p.nic == NO_NIC_NEAR and not any(f.gpu == p.index and f.setting == "GPU's nearest NIC" for f in out):
                out.append(_no_nic_on_its_numa_node(node, p, nics_on))
    if not compared:
        return Judged(
            not_applicable=f"{node}: nothing to compare the GPUs' placement with: no other node reports it, and "
            "the profile states no layout (node_config.gpu_numa_nodes, node_config.gpu_nics)"
        )
    return Judged(tuple(out))

"""InfiniBand, judged on the login node: the ports each node read from sysfs
(``workloads.infiniband.read_node``) against the profile's HCA count, link layer and rate.
"""

from __future__ import annotations

from pytest_gpucluster.verdict import Finding
from pytest_gpucluster.workloads.infiniband import IbNode


def findings(n: IbNode, *, hcas: int, rate_gbps: float, link_layer: str) -> list[Finding]:
    """Expected HCA count with ``link_layer`` (the node's); each of their ports ACTIVE/LinkUp at
    ``rate_gbps`` or more (the port's, ``mlx5_0/1``). Devices of another link layer (an Ethernet
    NIC on the same driver) are not counted."""
    if n.error:
        return [Finding.on_node(n.node, f"{n.node}: {n.error}")]
    if hcas == 0:
        return []
    mine = [p for p in n.ports if p.link_layer.lower() == link_layer.lower()]
    others = sorted({f"{p.device} ({p.link_layer})" for p in n.ports if p not in mine})
    out: list[Finding] = []
    devices = sorted({p.device for p in mine})
    if len(devices) < hcas:
        if not n.ports:
            found = f"no RDMA device under {n.root} (is the HCA driver, e.g. mlx5_ib, loaded?)"
        else:
            found = f"{len(devices)} {link_layer} HCA(s) ({', '.join(devices) or 'none'})"
            if others:
                found += f"; also {', '.join(others)}"
        out.append(Finding.on_node(n.node, f"{n.node}: {found}, expected {hcas}"))
    for p in mine:
        port = f"{p.device}/{p.port}"
        where = f"{n.node}:{port}"
        if not p.active:
            text = f"{where}: state {p.state!r}, phys_state {p.phys_state!r}; expected ACTIVE / LinkUp"
            out.append(Finding.on_node(n.node, text, port=port))
        elif p.rate_gbps is None or p.rate_gbps < rate_gbps:
            out.append(Finding.on_node(n.node, f"{where}: rate {p.rate!r}, expected {rate_gbps:g} Gb/s", port=port))
    return out

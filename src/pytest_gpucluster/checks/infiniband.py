"""InfiniBand, judged on the login node: the ports each node read from sysfs
(``workloads.infiniband.read_node``) against the profile's HCA count, link layer and rate.
"""

from __future__ import annotations

from pytest_gpucluster.workloads.infiniband import IbNode


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

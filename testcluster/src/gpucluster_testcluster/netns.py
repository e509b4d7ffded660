"""Bridge, per-node network namespaces and the /etc/hosts block.

Each compute node gets a network namespace named after it, with one end of a
veth pair (``eth0``, ``config.NODE_IFACE``) inside and the other end enslaved to the bridge, whose
address is the controller's. Nothing is routed beyond the bridge subnet.
"""

from __future__ import annotations

import os
from pathlib import Path

from . import config, packages
from .proc import ClusterError, run

NETNS_DIR = Path("/run/netns")


def _link_exists(name: str) -> bool:
    return Path("/sys/class/net", name).exists()


def netns_exists(node: str) -> bool:
    return (NETNS_DIR / node).exists()


def ensure_bridge() -> None:
    if packages.which("ip") is None:
        raise ClusterError(
            "no `ip` command (iproute2) on this machine, needed for the nodes' network namespaces: "
            "install iproute2, carry it in --debs (tools/fetch-gpu-debs does), or use --network host"
        )
    br = config.BRIDGE
    if not _link_exists(br):
        run(["ip", "link", "add", br, "type", "bridge"])
    # `replace` is idempotent where `add` fails on an existing address.
    run(["ip", "addr", "replace", f"{config.CONTROLLER_ADDR}/{config.SUBNET.prefixlen}", "dev", br])
    run(["ip", "link", "set", br, "up"])


def add_node(node: str, index: int) -> None:
    config.validate_node_name(node)
    veth = config.veth_name(node)
    if netns_exists(node):
        delete_node(node)
    run(["ip", "netns", "add", node])
    iface = config.NODE_IFACE
    run(["ip", "link", "add", veth, "type", "veth", "peer", "name", iface, "netns", node])
    run(["ip", "link", "set", veth, "master", config.BRIDGE])
    run(["ip", "link", "set", veth, "up"])
    addr = f"{config.node_address(index)}/{config.SUBNET.prefixlen}"
    run(["ip", "-n", node, "addr", "add", addr, "dev", iface])
    run(["ip", "-n", node, "link", "set", iface, "up"])
    # Jobs use localhost (e.g. torch rendezvous on a single node).
    run(["ip", "-n", node, "link", "set", "lo", "up"])


def set_node_link(node: str, up: bool) -> None:
    """Take a node's link to the bridge down or up again, from inside its namespace: the node
    drops off the network (slurmctld, the other nodes) while its processes keep running."""
    config.validate_node_name(node)
    if not netns_exists(node):
        raise ClusterError(f"{node} has no network namespace (a cluster with --network host has none to cut)")
    run(["ip", "-n", node, "link", "set", config.NODE_IFACE, "up" if up else "down"])


def slow_traffic(node: str, sources: list[str], rate: str | None) -> None:
    """Limit the traffic reaching ``node`` from the addresses ``sources`` to ``rate`` (tc's
    syntax, e.g. ``40mbit``), on the bridge side of its veth: a slow path between that node and
    those, the rest of its traffic untouched. ``rate`` None removes the limit. An ``htb`` qdisc
    (netem and prio are not in every kernel; htb and u32 are in the common ones) sends the
    sources' packets to a class of ``rate``, everything else to one of 10 Gbit/s."""
    config.validate_node_name(node)
    if not netns_exists(node):
        raise ClusterError(f"{node} has no network namespace (a cluster with --network host has none to slow)")
    if packages.which("tc") is None:
        raise ClusterError("no `tc` command (iproute2) on this machine, needed to slow a node's traffic")
    veth = config.veth_name(node)
    run(["tc", "qdisc", "del", "dev", veth, "root"], check=False)
    if rate is None:
        return
    tc = ["tc", "class", "add", "dev", veth, "parent", "1:", "classid"]
    run(["tc", "qdisc", "add", "dev", veth, "root", "handle", "1:", "htb", "default", "10"])
    run([*tc, "1:10", "htb", "rate", "10gbit"])
    run([*tc, "1:30", "htb", "rate", rate, "ceil", rate])
    for source in sources:
        match = ["match", "ip", "src", f"{source}/32"]
        run(["tc", "filter", "add", "dev", veth, "parent", "1:", "protocol", "ip", "u32", *match, "flowid", "1:30"])


def netns_pids(node: str) -> list[int]:
    if not netns_exists(node):
        return []
    out = run(["ip", "netns", "pids", node], check=False).stdout
    return [int(tok) for tok in out.split() if tok.isdigit()]


def delete_node(node: str) -> None:
    config.validate_node_name(node)
    veth = config.veth_name(node)
    if _link_exists(veth):
        run(["ip", "link", "del", veth], check=False)
    if netns_exists(node):
        run(["ip", "netns", "del", node], check=False)


def delete_bridge() -> None:
    if _link_exists(config.BRIDGE):
        run(["ip", "link", "del", config.BRIDGE], check=False)


def leftover_veths() -> list[str]:
    """Host-side veths of ours still present (e.g. after a crashed ``up``)."""
    try:
        names = os.listdir("/sys/class/net")
    except OSError:
        return []
    return sorted(n for n in names if n.startswith("gcv-"))


def write_hosts(hosts_file: Path, spec: config.ClusterSpec) -> None:
    text = hosts_file.read_text() if hosts_file.exists() else ""
    nodes = spec.node_names
    new = config.add_hosts_block(text, nodes, tuple(spec.node_addr(i) for i in range(len(nodes))))
    if new != text:
        _rewrite_in_place(hosts_file, new)


def remove_hosts(hosts_file: Path) -> None:
    if not hosts_file.exists():
        return
    text = hosts_file.read_text()
    new = config.strip_hosts_block(text)
    if new != text:
        _rewrite_in_place(hosts_file, new)


def _rewrite_in_place(path: Path, text: str) -> None:
    # /etc/hosts is often a bind mount (containers): replacing it by rename
    # would fail or detach it, so overwrite the same inode.
    with open(path, "r+") as fh:
        fh.seek(0)
        fh.write(text)
        fh.truncate()

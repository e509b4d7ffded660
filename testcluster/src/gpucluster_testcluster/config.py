"""Cluster parameters, on-disk layout and rendering of the Slurm/MariaDB configs.

Everything here is pure: no file system access, no subprocesses. The daemons
module writes what these functions return.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

GpuMode = Literal["fake", "real"]
# netns: every node in its own network + UTS namespace on a private bridge (needs `ip`).
# host: every node in the host's network namespace (own UTS namespace, so its own hostname),
# all on 127.0.0.1 with a slurmd port each; for machines without iproute2 or CAP_NET_ADMIN.
Network = Literal["netns", "host"]

# Other code (test fixtures, CI scripts, docs) relies on these values; change
# them only together with docs/testcluster.md.
DEFAULT_STATE_DIR = Path("/var/lib/gpucluster-testcluster")
DEFAULT_SHARED_DIR = Path("/srv/gpucluster-ci/shared")
CLUSTER_NAME = "gpuci"
PARTITION = "debug"
PARTITION_MAX_TIME_MIN = 60
DEFAULT_NODES = 2
DEFAULT_GPUS_PER_NODE = 4
NODE_CPUS = 4
NODE_REAL_MEMORY_MB = 4000
BRIDGE = "gcbr0"
# The node side of each node's veth pair, as jobs see it (NCCL_SOCKET_IFNAME names it).
NODE_IFACE = "eth0"
SUBNET = ipaddress.IPv4Network("10.211.0.0/24")
CONTROLLER_ADDR = ipaddress.IPv4Address("10.211.0.1")
FIRST_NODE_HOST_PART = 11

# Non-default ports so that a system Slurm or MariaDB on the same machine is
# left alone.
SLURMCTLD_PORT = 16817
SLURMD_PORT = 16818
SLURMDBD_PORT = 16819
MARIADB_PORT = 16306
# host network: node i's slurmd listens on HOST_SLURMD_PORT + i (they share one address).
HOST_SLURMD_PORT = 16830
LOOPBACK = ipaddress.IPv4Address("127.0.0.1")

# The fake GRES device files: a character device (Slurm rejects plain files) other than /dev/null
# (1:3), so a file hidden from a node by /dev/null mounted over it differs from one it owns. 1:5 is
# /dev/zero; nothing opens these files.
FAKE_GPU_DEVICE = (1, 5)

SLURMDBD_DB = "slurm_acct_db"
SLURMDBD_DB_USER = "slurm"

_NODE_NAME_RE = re.compile(r"^[a-z][a-z0-9]{0,9}$")
_HOSTNAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9-]{0,62}$")


def node_names(count: int) -> tuple[str, ...]:
    """Names of the compute nodes, ``node1`` .. ``nodeN``."""
    if count < 1:
        raise ValueError(f"need at least one node, got {count}")
    return tuple(f"node{i}" for i in range(1, count + 1))


def check_node_count(count: int, network: str) -> None:
    """A node count the network mode can address: in netns mode the nodes' addresses, .11
    upwards, stay inside the /24; in host mode they share the loopback address and each slurmd has
    its own port from HOST_SLURMD_PORT up, so only the port range bounds them."""
    node_names(count)
    if network == "netns" and FIRST_NODE_HOST_PART + count > 254:
        raise ValueError(f"too many nodes for the netns network: {count} (at most {254 - FIRST_NODE_HOST_PART})")
    if network == "host" and HOST_SLURMD_PORT + count > 65535:
        raise ValueError(f"too many nodes: {count}")


def node_address(index: int) -> ipaddress.IPv4Address:
    """Bridge address of the node with 0-based ``index``."""
    return CONTROLLER_ADDR + (FIRST_NODE_HOST_PART - 1 + index)


def veth_name(node: str) -> str:
    """Host side of a node's veth pair (kernel limit: 15 characters)."""
    return f"gcv-{node}"


def validate_node_name(node: str) -> str:
    # Node names end up in argv, /etc/hosts and interface names.
    if not _NODE_NAME_RE.match(node):
        raise ValueError(f"invalid node name: {node!r}")
    return node


def hostlist(nodes: tuple[str, ...]) -> str:
    """Compact Slurm hostlist for ``node1..nodeN`` (``node[1-3]``)."""
    if len(nodes) == 1:
        return nodes[0]
    return f"node[1-{len(nodes)}]"


def numbered_files(prefix: str, first: int, count: int) -> str:
    """gres.conf file list: ``/dev/nvidia[0-3]``, or ``/dev/nvidia2`` for one."""
    if count == 1:
        return f"{prefix}{first}"
    return f"{prefix}[{first}-{first + count - 1}]"


@dataclass(frozen=True)
class Paths:
    """Every path the cluster writes, all below ``state_dir`` except shared/hosts."""

    state_dir: Path = DEFAULT_STATE_DIR
    shared_dir: Path = DEFAULT_SHARED_DIR
    hosts_file: Path = Path("/etc/hosts")

    @property
    def etc(self) -> Path:
        return self.state_dir / "etc"

    @property
    def slurm_conf(self) -> Path:
        return self.etc / "slurm.conf"

    @property
    def gres_conf(self) -> Path:
        return self.etc / "gres.conf"

    @property
    def cgroup_conf(self) -> Path:
        return self.etc / "cgroup.conf"

    @property
    def slurmdbd_conf(self) -> Path:
        # slurmdbd finds its config next to $SLURM_CONF.
        return self.etc / "slurmdbd.conf"

    @property
    def run(self) -> Path:
        return self.state_dir / "run"

    @property
    def log(self) -> Path:
        return self.state_dir / "log"

    @property
    def spool(self) -> Path:
        return self.state_dir / "spool"

    @property
    def dev(self) -> Path:
        return self.state_dir / "dev"

    @property
    def munge_dir(self) -> Path:
        return self.state_dir / "munge"

    @property
    def munge_key(self) -> Path:
        return self.munge_dir / "munge.key"

    @property
    def munge_socket(self) -> Path:
        return self.munge_dir / "munge.socket"

    @property
    def munge_pid(self) -> Path:
        return self.run / "munged.pid"

    @property
    def mysql_dir(self) -> Path:
        return self.state_dir / "mysql"

    @property
    def mysql_data(self) -> Path:
        return self.mysql_dir / "data"

    @property
    def mysql_run(self) -> Path:
        # Must be writable by the mysql user, hence not the shared run dir.
        return self.mysql_dir / "run"

    @property
    def mysql_socket(self) -> Path:
        return self.mysql_run / "mysqld.sock"

    @property
    def mysql_pid(self) -> Path:
        return self.mysql_run / "mysqld.pid"

    @property
    def mysql_log_dir(self) -> Path:
        # Under log/ so that `down --keep-logs` keeps it; owned by mysql.
        return self.log / "mariadb"

    @property
    def mysql_log(self) -> Path:
        return self.mysql_log_dir / "mysqld.err"

    @property
    def slurmdbd_pid(self) -> Path:
        return self.run / "slurmdbd.pid"

    @property
    def slurmctld_pid(self) -> Path:
        return self.run / "slurmctld.pid"

    def slurmd_pid(self, node: str) -> Path:
        return self.run / f"slurmd-{node}.pid"

    def slurmd_log(self, node: str) -> Path:
        return self.log / f"slurmd-{node}.log"

    @property
    def record(self) -> Path:
        """JSON record of what ``up`` created, read by ``down`` and ``status``."""
        return self.state_dir / "cluster.json"


@dataclass(frozen=True)
class ClusterSpec:
    """What the user asked for; fully determines the rendered configs."""

    nodes: int = DEFAULT_NODES
    gpus_per_node: int = DEFAULT_GPUS_PER_NODE
    gpu_mode: GpuMode = "fake"
    accounting: bool = True
    constrain_devices: bool = True
    controller_host: str = "localhost"
    # Real mode: how many /dev/nvidiaN exist; decides whether nodes get
    # disjoint GPUs or all share the same ones.
    real_gpu_count: int = 0
    # Real mode: the device minors of the machine's GPUs in PCI bus order (nvidia-smi's order);
    # empty means 0 .. real_gpu_count-1. Node i owns the i-th share of this order.
    gpu_minors: tuple[int, ...] = ()
    # Every node names the same GPUs (/dev/nvidia0..G-1) even where the machine has enough for
    # each to get its own: two nodes in their own UTS namespaces are two hosts to NCCL, so one
    # GPU carries a two-node job (its socket transport over the nodes' bridge).
    shared_gpus: bool = False
    # Nodes Slurm is told have no GPUs (no Gres on their NodeName line, no gres.conf line): a
    # fault run, the node's GPUs hidden from the scheduler.
    gpuless_nodes: tuple[str, ...] = ()
    cgroup_plugin: Literal["cgroup/v2", "cgroup/v1"] = "cgroup/v2"
    network: Network = "netns"
    # What each node advertises; real mode gives each node its share of the machine.
    node_cpus: int = NODE_CPUS
    node_memory_mb: int = NODE_REAL_MEMORY_MB
    paths: Paths = field(default_factory=Paths)

    def __post_init__(self) -> None:
        if self.gpus_per_node < 0:
            raise ValueError("gpus_per_node must be >= 0")
        if self.gpu_mode not in ("fake", "real"):
            raise ValueError(f"gpu_mode must be 'fake' or 'real', not {self.gpu_mode!r}")
        if self.network not in ("netns", "host"):
            raise ValueError(f"network must be 'netns' or 'host', not {self.network!r}")
        if not _HOSTNAME_RE.match(self.controller_host):
            raise ValueError(f"invalid controller host name: {self.controller_host!r}")
        check_node_count(self.nodes, self.network)
        names = node_names(self.nodes)
        for node in self.gpuless_nodes:
            if node not in names:
                raise ValueError(f"gpuless_nodes: no node {node!r} in {', '.join(names)}")

    def node_gpus(self, node: str) -> int:
        """GPUs Slurm is told ``node`` has."""
        return 0 if node in self.gpuless_nodes else self.gpus_per_node

    @property
    def node_names(self) -> tuple[str, ...]:
        return node_names(self.nodes)

    @property
    def controller_addr(self) -> ipaddress.IPv4Address:
        return CONTROLLER_ADDR if self.network == "netns" else LOOPBACK

    def node_addr(self, index: int) -> ipaddress.IPv4Address:
        """Where slurmctld reaches the node with 0-based ``index`` (and /etc/hosts points)."""
        return node_address(index) if self.network == "netns" else LOOPBACK

    @property
    def gpu_order(self) -> tuple[int, ...]:
        """Real mode: the device minors of the machine's GPUs in PCI bus order."""
        return self.gpu_minors or tuple(range(self.real_gpu_count))

    @property
    def nodes_own_gpus(self) -> bool:
        """Every node has GPUs of its own, which the other nodes cannot open; otherwise every node
        names the same ones (``shared_gpus``, or too few GPUs in the machine for a share each)."""
        if self.shared_gpus:
            return False
        return self.gpu_mode == "fake" or len(self.gpu_order) >= self.gpus_per_node * self.nodes

    @property
    def fake_gpu_count(self) -> int:
        """Fake mode: how many GRES device files ``<state>/dev/gpuK`` the cluster makes."""
        return self.gpus_per_node * (self.nodes if self.nodes_own_gpus else 1)

    def _share(self, node_index: int) -> range:
        g = self.gpus_per_node
        first = g * node_index if self.nodes_own_gpus else 0
        return range(first, first + g)

    def node_devices(self, node_index: int) -> tuple[str, ...]:
        """The device files of one node's GPUs, in the order jobs number them (PCI bus order)."""
        share = self._share(node_index)
        if self.gpu_mode == "fake":
            return tuple(f"{self.paths.dev}/gpu{k}" for k in share)
        order = self.gpu_order
        minors = [order[k] for k in share] if len(order) >= share.stop else list(share)
        return tuple(f"/dev/nvidia{m}" for m in minors)

    def gpu_files(self, node_index: int) -> str:
        """gres.conf ``File=`` value of one node: a range where the files are numbered in a row,
        else the files in PCI bus order, comma-separated."""
        devices = self.node_devices(node_index)
        prefix = f"{self.paths.dev}/gpu" if self.gpu_mode == "fake" else "/dev/nvidia"
        numbers = [int(d.removeprefix(prefix)) for d in devices]
        if numbers and numbers == list(range(numbers[0], numbers[0] + len(numbers))):
            return numbered_files(prefix, numbers[0], len(numbers))
        return ",".join(devices)

    def hidden_devices(self, node_index: int) -> tuple[str, ...]:
        """The other nodes' GPU device files, which /dev/null covers in this node's own mount
        namespace. None where the nodes share their GPUs. A GPU no node owns stays visible: a node
        told of fewer GPUs than it has (a fault run) still shows the difference."""
        if not self.nodes_own_gpus:
            return ()
        own = set(self.node_devices(node_index))
        others = (d for j in range(self.nodes) if j != node_index for d in self.node_devices(j))
        return tuple(d for d in dict.fromkeys(others) if d not in own)


def render_slurm_conf(spec: ClusterSpec) -> str:
    p = spec.paths
    nodes = spec.node_names
    real = spec.gpu_mode == "real"
    lines = [
        "# Generated by gpucluster_testcluster; rewritten on every 'up'.",
        f"ClusterName={CLUSTER_NAME}",
        f"SlurmctldHost={spec.controller_host}({spec.controller_addr})",
        f"SlurmctldPort={SLURMCTLD_PORT}",
        f"SlurmdPort={SLURMD_PORT}",
        "AuthType=auth/munge",
        "CredType=cred/munge",
        # A private munged, so the system's munge (if any) is not touched.
        f"AuthInfo=socket={p.munge_socket}",
        "SlurmUser=root",
        "SlurmdUser=root",
        f"StateSaveLocation={p.spool}/ctld",
        f"SlurmdSpoolDir={p.spool}/slurmd-%n",
        f"SlurmctldPidFile={p.slurmctld_pid}",
        f"SlurmdPidFile={p.run}/slurmd-%n.pid",
        f"SlurmctldLogFile={p.log}/slurmctld.log",
        f"SlurmdLogFile={p.log}/slurmd-%n.log",
        "SlurmctldDebug=info",
        "SlurmdDebug=info",
        "SelectType=select/cons_tres",
        # Not CR_Core_Memory: jobs without --mem would take the whole node.
        "SelectTypeParameters=CR_Core",
        "SchedulerType=sched/backfill",
        # Without it back-to-back batch jobs wait ~3 s each.
        "SchedulerParameters=batch_sched_delay=0",
        # Nodes advertise more CPUs/memory/GPUs than the machine has.
        "SlurmdParameters=config_overrides",
        "ReturnToService=2",
        "KillWait=2",
        "MinJobAge=120",
        "InactiveLimit=0",
        "MessageTimeout=10",
        # Short, so fault-injection tests see a killed slurmd soon.
        "SlurmdTimeout=20",
        "MpiDefault=none",
        # Debian's default mail program is not installed; avoids a log error.
        "MailProg=/bin/true",
        "JobAcctGatherType=jobacct_gather/none",
        "JobCompType=jobcomp/none",
        "GresTypes=gpu",
    ]
    if real:
        lines += [
            "ProctrackType=proctrack/cgroup",
            "TaskPlugin=task/cgroup,task/affinity",
        ]
    else:
        # No cgroup dependency at all on CI machines.
        lines += [
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
        ]
    if spec.accounting:
        lines += [
            "AccountingStorageType=accounting_storage/slurmdbd",
            "AccountingStorageHost=localhost",
            f"AccountingStoragePort={SLURMDBD_PORT}",
            # Connections to slurmdbd take their munge socket from here, not
            # from AuthInfo.
            f"AccountingStoragePass={p.munge_socket}",
            "AccountingStorageTRES=gres/gpu",
        ]
    else:
        lines.append("AccountingStorageType=accounting_storage/none")
    for i, node in enumerate(nodes):
        gres = f" Gres=gpu:{spec.node_gpus(node)}" if spec.node_gpus(node) else ""
        # Sharing one address, the nodes need a port each (Debian's slurmd is a multiple-slurmd build).
        port = f" Port={HOST_SLURMD_PORT + i}" if spec.network == "host" else ""
        lines.append(
            f"NodeName={node} NodeAddr={spec.node_addr(i)} NodeHostname={node}{port}"
            f" CPUs={spec.node_cpus} RealMemory={spec.node_memory_mb}{gres} State=UNKNOWN"
        )
    lines.append(
        f"PartitionName={PARTITION} Nodes={hostlist(nodes)} Default=YES MaxTime={PARTITION_MAX_TIME_MIN} State=UP"
    )
    return "\n".join(lines) + "\n"


def render_gres_conf(spec: ClusterSpec) -> str:
    lines = ["# Generated by gpucluster_testcluster.", "AutoDetect=off"]
    for i, node in enumerate(spec.node_names):
        if spec.node_gpus(node):
            lines.append(f"NodeName={node} Name=gpu File={spec.gpu_files(i)}")
    return "\n".join(lines) + "\n"


def render_cgroup_conf(spec: ClusterSpec) -> str:
    lines = ["# Generated by gpucluster_testcluster."]
    if spec.gpu_mode == "real":
        lines.append(f"CgroupPlugin={spec.cgroup_plugin}")
        if spec.cgroup_plugin == "cgroup/v2":
            # Machines without systemd (the GPU box runs none).
            lines.append("IgnoreSystemd=yes")
        lines.append(f"ConstrainDevices={'yes' if spec.constrain_devices else 'no'}")
    else:
        lines.append("CgroupPlugin=autodetect")
        if spec.cgroup_plugin == "cgroup/v2":
            lines.append("IgnoreSystemd=yes")
        lines.append("ConstrainDevices=no")
    lines += ["ConstrainCores=no", "ConstrainRAMSpace=no"]
    return "\n".join(lines) + "\n"


def render_slurmdbd_conf(spec: ClusterSpec, storage_password: str) -> str:
    p = spec.paths
    lines = [
        "# Generated by gpucluster_testcluster.",
        "AuthType=auth/munge",
        f"AuthInfo=socket={p.munge_socket}",
        "DbdHost=localhost",
        "DbdAddr=127.0.0.1",
        f"DbdPort={SLURMDBD_PORT}",
        "SlurmUser=root",
        "DebugLevel=info",
        f"LogFile={p.log}/slurmdbd.log",
        f"PidFile={p.slurmdbd_pid}",
        "StorageType=accounting_storage/mysql",
        "StorageHost=127.0.0.1",
        f"StoragePort={MARIADB_PORT}",
        f"StorageUser={SLURMDBD_DB_USER}",
        f"StoragePass={storage_password}",
        f"StorageLoc={SLURMDBD_DB}",
    ]
    return "\n".join(lines) + "\n"


def render_mariadb_setup_sql(storage_password: str) -> str:
    """SQL run once over the root unix socket to give slurmdbd a TCP login."""
    if not re.fullmatch(r"[A-Za-z0-9]+", storage_password):
        raise ValueError("storage password must be alphanumeric")
    stmts = []
    for host in ("127.0.0.1", "localhost"):
        user = f"'{SLURMDBD_DB_USER}'@'{host}'"
        stmts.append(f"CREATE USER IF NOT EXISTS {user} IDENTIFIED BY '{storage_password}';")
        stmts.append(f"GRANT ALL ON {SLURMDBD_DB}.* TO {user};")
    stmts.append("FLUSH PRIVILEGES;")
    return "\n".join(stmts) + "\n"


HOSTS_BEGIN = "# BEGIN gpucluster-testcluster"
HOSTS_END = "# END gpucluster-testcluster"


def strip_hosts_block(text: str) -> str:
    """``text`` without any marked block (all of them, should there be several)."""
    out: list[str] = []
    inside = False
    for line in text.splitlines(keepends=True):
        stripped = line.strip()
        if stripped == HOSTS_BEGIN:
            inside = True
            continue
        if stripped == HOSTS_END and inside:
            inside = False
            continue
        if not inside:
            out.append(line)
    return "".join(out)


def add_hosts_block(text: str, nodes: tuple[str, ...], addrs: tuple[ipaddress.IPv4Address, ...] | None = None) -> str:
    """``text`` with our block naming ``nodes`` (at ``addrs``, by default their bridge addresses)."""
    base = strip_hosts_block(text)
    if base and not base.endswith("\n"):
        base += "\n"
    where = addrs if addrs is not None else tuple(node_address(i) for i in range(len(nodes)))
    block = [HOSTS_BEGIN]
    block += [f"{addr} {node}" for addr, node in zip(where, nodes, strict=True)]
    block.append(HOSTS_END)
    return base + "\n".join(block) + "\n"

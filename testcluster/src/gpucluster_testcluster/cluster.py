"""The TestCluster API: bring a multi-node Slurm up on this machine, and down."""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import socket
import stat
import sys
import time
from pathlib import Path
from typing import Any

from . import config, daemons, gpus, netns, packages
from .config import ClusterSpec, GpuMode, Network, Paths
from .proc import ClusterError, alive_from_pid_file, exclusive, pid_matches, run, terminate, wait_for
from .state import (
    ClusterInfo,
    NodeState,
    all_idle,
    machine_share,
    make_shared_dir,
    node_gpus,
    parse_sinfo,
    read_record,
    remove_state_dir,
    spec_json,
    write_record,
)


def _log(msg: str) -> None:
    print(f"testcluster: {msg}", file=sys.stderr, flush=True)


class TestCluster:
    """A Slurm cluster of ``nodes`` namespaced slurmds on this machine (needs root).

    The constructor only records what is wanted; ``up()`` makes it so,
    reusing a healthy cluster with the same parameters.
    """

    # pytest would otherwise try to collect this class from test modules.
    __test__ = False

    def __init__(
        self,
        nodes: int = config.DEFAULT_NODES,
        gpus_per_node: int = config.DEFAULT_GPUS_PER_NODE,
        gpu_mode: GpuMode = "fake",
        *,
        accounting: bool | None = None,
        constrain_devices: bool = True,
        debs: Path | str | None = None,
        install: bool = True,
        state_dir: Path | str = config.DEFAULT_STATE_DIR,
        shared_dir: Path | str = config.DEFAULT_SHARED_DIR,
        keep_logs: bool = False,
        timeout: float = 60.0,
        verbose: bool = True,
        network: Network = "netns",
        shared_gpus: bool = False,
        gpuless_nodes: tuple[str, ...] = (),
        cpus_per_node: int | None = None,
    ) -> None:
        """``accounting=None`` means: on when slurmdbd and MariaDB are available; ``shared_gpus``:
        every node names the same GPUs; ``gpuless_nodes``: Slurm is told these have none;
        ``cpus_per_node``: the CPUs each node advertises in fake mode (8 tasks of a node with 8 GPUs
        need 8)."""
        if cpus_per_node is not None and cpus_per_node < 1:
            raise ValueError(f"cpus_per_node must be >= 1, not {cpus_per_node}")
        config.check_node_count(nodes, network)
        self.nodes = nodes
        self.gpus_per_node = gpus_per_node
        self.gpu_mode: GpuMode = gpu_mode
        self.accounting = accounting
        self.constrain_devices = constrain_devices
        self.debs = Path(debs) if debs is not None else None
        self.install = install
        self.paths = Paths(state_dir=Path(state_dir), shared_dir=Path(shared_dir))
        self.keep_logs = keep_logs
        self.timeout = timeout
        self.verbose = verbose
        self.network: Network = network
        self.shared_gpus = shared_gpus
        self.gpuless_nodes = tuple(gpuless_nodes)
        self.cpus_per_node = cpus_per_node

    # --- public API ---------------------------------------------------------

    @classmethod
    def from_running(cls, state_dir: Path | str = config.DEFAULT_STATE_DIR) -> TestCluster | None:
        """A handle on the healthy cluster already running from ``state_dir``, if any."""
        paths = Paths(state_dir=Path(state_dir))
        record = read_record(paths)
        if record is None or not record.get("complete"):
            return None
        spec = record["spec"]
        cluster = cls(
            nodes=int(spec["nodes"]),
            gpus_per_node=int(spec["gpus_per_node"]),
            gpu_mode=spec["gpu_mode"],
            accounting=bool(spec["accounting"]),
            constrain_devices=bool(spec["constrain_devices"]),
            state_dir=state_dir,
            shared_dir=record["shared_dir"],
            install=False,
            network=spec.get("network", "netns"),
            shared_gpus=bool(spec.get("shared_gpus", False)),
            gpuless_nodes=tuple(spec.get("gpuless_nodes", ())),
            cpus_per_node=int(spec["node_cpus"]) if spec["gpu_mode"] == "fake" else None,
        )
        return cluster if cluster.is_up() else None

    def env(self) -> dict[str, str]:
        """``os.environ`` plus ``SLURM_CONF`` pointing at this cluster."""
        return daemons.slurm_env(self.paths)

    def info(self) -> ClusterInfo:
        record = read_record(self.paths)
        accounting = bool(record["spec"]["accounting"]) if record else bool(self.accounting)
        return ClusterInfo(
            slurm_conf=self.paths.slurm_conf,
            nodes=config.node_names(self.nodes),
            shared_dir=self.paths.shared_dir,
            partition=config.PARTITION,
            cluster_name=config.CLUSTER_NAME,
            gpus_per_node=self.gpus_per_node,
            gpu_mode=self.gpu_mode,
            accounting=accounting,
            state_dir=self.paths.state_dir,
        )

    def node_states(self) -> list[NodeState]:
        sinfo = packages.which("sinfo")
        if sinfo is None or not self.paths.slurm_conf.exists():
            return []
        proc = run([sinfo, "-h", "-N", "-o", "%N|%t|%T"], env=self.env(), check=False, timeout=15)
        return parse_sinfo(proc.stdout) if proc.returncode == 0 else []

    def is_up(self) -> bool:
        """Every daemon of the recorded cluster runs and every node is usable."""
        record = read_record(self.paths)
        if record is None or not record.get("complete"):
            return False
        return self._healthy(record)

    def up(self) -> ClusterInfo:
        """Start the cluster, or reuse it when it already runs healthy with these parameters."""
        _require_root()
        with exclusive():
            return self._up()

    def down(self, keep_logs: bool | None = None) -> None:
        """Stop everything ``up`` started and undo its changes; safe to repeat."""
        _require_root()
        with exclusive():
            self._down(keep_logs)

    def _up(self) -> ClusterInfo:
        t0 = time.monotonic()
        self._ensure_software()
        spec = self._spec()
        record = read_record(self.paths)
        if record is not None:
            if record.get("complete") and record["spec"] == spec_json(spec) and self._healthy(record):
                self._say(f"cluster already up ({time.monotonic() - t0:.1f}s)")
                return self.info()
            self._say("cluster is half-up or differs from the request: restarting")
            self._down(keep_logs=True)
        elif netns.leftover_veths() or Path("/sys/class/net", config.BRIDGE).exists():
            self._say("leftovers of an earlier cluster found: cleaning up")
            self._down(keep_logs=True)
        try:
            self._bring_up(spec)
        except BaseException:
            self._say(f"bring-up failed; logs in {self.paths.log}; cleaning up")
            self._down(keep_logs=True)
            raise
        self._say(f"up in {time.monotonic() - t0:.1f}s")
        return self.info()

    def _down(self, keep_logs: bool | None) -> None:
        keep = self.keep_logs if keep_logs is None else keep_logs
        paths = self.paths
        record = read_record(paths) or {}
        node_list = list(record.get("nodes", []))
        for veth in netns.leftover_veths():
            node = veth.removeprefix("gcv-")
            if node not in node_list:
                node_list.append(node)
        self._cancel_all_jobs()
        for node in node_list:
            daemons.stop_pid_file(paths.slurmd_pid(node), "slurmd")
        for node in node_list:
            # Job steps and their children live in the node's namespace;
            # anything left there is ours.
            leftovers = netns.netns_pids(node)
            if leftovers:
                terminate(leftovers, grace=daemons.STOP_GRACE)
        daemons.stop_pid_file(paths.slurmctld_pid, "slurmctld")
        daemons.stop_pid_file(paths.slurmdbd_pid, "slurmdbd")
        daemons.stop_mariadb(paths)
        daemons.stop_pid_file(paths.munge_pid, "munged")
        for node in node_list:
            netns.delete_node(node)
        netns.delete_bridge()
        netns.remove_hosts(paths.hosts_file)
        # Slurm's per-node cgroups first: they may sit inside one we created.
        daemons.remove_cgroup_dirs(daemons.slurm_cgroup_dirs(node_list))
        daemons.remove_cgroup_dirs(record.get("cgroup_created", []))
        for created in record.get("created_dirs", []):
            shutil.rmtree(created, ignore_errors=True)
        remove_state_dir(paths.state_dir, keep_logs=keep)

    def kill_slurmd(self, node: str, sig: signal.Signals = signal.SIGKILL, *, with_jobs: bool = False) -> None:
        """Simulate a node failure: signal its slurmd (and, optionally, its jobs)."""
        config.validate_node_name(node)
        pid = alive_from_pid_file(self.paths.slurmd_pid(node), "slurmd")
        if pid is not None:
            os.kill(pid, sig)
            if sig == signal.SIGKILL:
                # Callers check the effect right away; SIGKILL is not instant.
                wait_for(f"slurmd of {node} to die", lambda: not pid_matches(pid, "slurmd"), 10.0, 0.02)
        if with_jobs:
            for p in netns.netns_pids(node):
                try:
                    os.kill(p, signal.SIGKILL)
                except ProcessLookupError:
                    pass

    def start_slurmd(self, node: str, *, wait: bool = True) -> None:
        """(Re)start a node's slurmd; with ``wait``, until the node is usable again."""
        config.validate_node_name(node)
        if node not in config.node_names(self.nodes):
            raise ValueError(f"no such node: {node}")
        if alive_from_pid_file(self.paths.slurmd_pid(node), "slurmd") is None:
            hidden = (read_record(self.paths) or {}).get("hidden_devices", {}).get(node, [])
            daemons.start_slurmd(self.paths, node, self.network, hide=tuple(hidden))
        if wait:
            wait_for(
                f"{node} to be usable",
                lambda: any(n.name == node and n.healthy for n in self.node_states()),
                self.timeout,
                interval=0.2,
            )

    def set_link(self, node: str, *, up: bool) -> None:
        """Take ``node``'s network link down (it drops off the network, its processes keep
        running) or bring it up again; netns mode only."""
        if node not in config.node_names(self.nodes):
            raise ValueError(f"no such node: {node}")
        netns.set_node_link(node, up)

    def slow_path(self, node: str, sources: tuple[str, ...], rate: str | None) -> None:
        """Limit what reaches ``node`` from the nodes ``sources`` to ``rate`` (``40mbit``), or
        lift the limit (``None``): a slow path between them, each node's other traffic as fast
        as before; netns mode only."""
        names = config.node_names(self.nodes)
        for n in (node, *sources):
            if n not in names:
                raise ValueError(f"no such node: {n}")
        netns.slow_traffic(node, [str(config.node_address(names.index(n))) for n in sources], rate)

    # --- internals ----------------------------------------------------------

    def _say(self, msg: str) -> None:
        if self.verbose:
            _log(msg)

    def _ensure_software(self) -> None:
        if self.debs is not None:
            packages.install_debs(self.debs, log=self.verbose)
        elif self.install:
            packages.ensure_installed(want_accounting=self.accounting is not False, log=self.verbose)

    def _spec(self) -> ClusterSpec:
        accounting = self.accounting
        if accounting is None:
            accounting = packages.have_accounting_binaries()
        elif accounting and not packages.have_accounting_binaries():
            raise ClusterError("accounting requested but slurmdbd/MariaDB are not installed")
        host = socket.gethostname().split(".")[0]
        unified = daemons.cgroup_v2_unified()
        machine = self._machine_gpus()
        return ClusterSpec(
            nodes=self.nodes,
            gpus_per_node=self.gpus_per_node,
            gpu_mode=self.gpu_mode,
            accounting=accounting,
            constrain_devices=self.constrain_devices,
            controller_host=host,
            real_gpu_count=len(machine),
            gpu_minors=tuple(g.minor for g in machine),
            cgroup_plugin="cgroup/v2" if unified else "cgroup/v1",
            network=self.network,
            shared_gpus=self.shared_gpus,
            gpuless_nodes=self.gpuless_nodes,
            **(machine_share(self.nodes) if self.gpu_mode == "real" else self._fake_share()),
            paths=self.paths,
        )

    def _machine_gpus(self) -> tuple[gpus.Gpu, ...]:
        """Real mode: the machine's GPUs in PCI bus order (nvidia-smi's), each with its device file."""
        return gpus.with_device_files(gpus.machine_gpus()) if self.gpu_mode == "real" else ()

    def _fake_share(self) -> dict[str, int]:
        return {} if self.cpus_per_node is None else {"node_cpus": self.cpus_per_node}

    def _healthy(self, record: dict[str, Any]) -> bool:
        return not self._problems(record)

    def _problems(self, record: dict[str, Any]) -> list[str]:
        paths = self.paths
        nodes = list(record.get("nodes", []))
        checks = [
            (paths.munge_pid, "munged"),
            (paths.slurmctld_pid, "slurmctld"),
            *((paths.slurmd_pid(n), "slurmd") for n in nodes),
        ]
        if record["spec"]["accounting"]:
            checks += [(paths.mysql_pid, "mariadbd"), (paths.slurmdbd_pid, "slurmdbd")]
        problems = [f"{f.name}: {name} not running" for f, name in checks if alive_from_pid_file(f, name) is None]
        if alive_from_pid_file(paths.slurmctld_pid, "slurmctld") is None:
            return problems
        states = {s.name: s for s in self.node_states()}
        for node in nodes:
            st = states.get(node)
            if st is None:
                problems.append(f"{node}: unknown to slurmctld")
            elif not st.healthy:
                problems.append(f"{node}: {st.state}{'' if st.responding else ', not responding'}")
        return problems

    def problems(self) -> list[str]:
        """What keeps the cluster from being healthy; empty when ``is_up()``."""
        record = read_record(self.paths)
        if record is None:
            return ["not running (no cluster record)"]
        problems = [] if record.get("complete") else ["bring-up did not complete"]
        return problems + self._problems(record)

    def _cancel_all_jobs(self) -> None:
        env = self.env()
        squeue = packages.which("squeue")
        scancel = packages.which("scancel")
        if squeue is None or scancel is None or alive_from_pid_file(self.paths.slurmctld_pid, "slurmctld") is None:
            return

        def job_ids() -> list[str]:
            out = run([squeue, "-h", "-o", "%i"], env=env, check=False, timeout=15).stdout
            return out.split()

        ids = job_ids()
        if not ids:
            return
        run([scancel, *ids], env=env, check=False, timeout=30)
        try:
            wait_for("jobs to end", lambda: not job_ids(), 10.0, interval=0.2)
        except ClusterError:
            # The daemons get killed next anyway.
            pass

    def _bring_up(self, spec: ClusterSpec) -> None:
        paths = self.paths
        nodes = spec.node_names
        remove_state_dir(paths.state_dir, keep_logs=True)
        for d in (paths.state_dir, paths.etc, paths.run, paths.log, paths.spool, paths.dev):
            d.mkdir(mode=0o755, parents=True, exist_ok=True)
        record: dict[str, Any] = {
            "spec": spec_json(spec),
            "nodes": list(nodes),
            "shared_dir": str(paths.shared_dir),
            "created_dirs": make_shared_dir(paths.shared_dir),
            "cgroup_created": [],
            # Each node's GPU device files, and those /dev/null is mounted over in its namespace.
            "node_gpus": node_gpus(spec, self._machine_gpus()),
            "hidden_devices": {node: list(spec.hidden_devices(i)) for i, node in enumerate(nodes)},
            "complete": False,
        }
        # Written before anything else is created, so `down` can undo a crash.
        write_record(paths, record)

        password = secrets.token_hex(16)
        paths.slurm_conf.write_text(config.render_slurm_conf(spec))
        paths.gres_conf.write_text(config.render_gres_conf(spec))
        paths.cgroup_conf.write_text(config.render_cgroup_conf(spec))
        if spec.gpu_mode == "fake":
            for k in range(spec.fake_gpu_count):
                os.mknod(paths.dev / f"gpu{k}", stat.S_IFCHR | 0o666, os.makedev(*config.FAKE_GPU_DEVICE))
        elif spec.gpus_per_node and spec.real_gpu_count < spec.gpus_per_node:
            raise ClusterError(
                f"--gpu-mode real wants {spec.gpus_per_node} GPUs per node, found {spec.real_gpu_count} /dev/nvidiaN"
            )
        if spec.cgroup_plugin == "cgroup/v2":
            # slurmd loads its cgroup plugin in either GPU mode; without systemd it needs this.
            record["cgroup_created"] = daemons.prepare_cgroup_v2()
            write_record(paths, record)

        t = time.monotonic()
        if spec.network == "netns":
            netns.ensure_bridge()
            for i, node in enumerate(nodes):
                netns.add_node(node, i)
        netns.write_hosts(paths.hosts_file, spec)
        self._say(f"network ({spec.network}): {time.monotonic() - t:.1f}s")

        t = time.monotonic()
        daemons.start_munge(paths)
        if spec.accounting:
            # slurmdbd.conf holds the DB password; slurmdbd insists on 0600.
            fd = os.open(paths.slurmdbd_conf, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as fh:
                fh.write(config.render_slurmdbd_conf(spec, password))
            daemons.start_mariadb(paths, password)
            self._say(f"munge + MariaDB: {time.monotonic() - t:.1f}s")
            t = time.monotonic()
            daemons.start_slurmdbd(paths)
            daemons.register_cluster(paths)
            self._say(f"slurmdbd: {time.monotonic() - t:.1f}s")
            t = time.monotonic()
        daemons.start_slurmctld(paths)
        for i, node in enumerate(nodes):
            daemons.start_slurmd(paths, node, spec.network, hide=spec.hidden_devices(i))
        wait_for(
            "all nodes idle",
            lambda: all_idle(self.node_states(), nodes),
            self.timeout,
            interval=0.1,
        )
        self._say(f"slurmctld + {len(nodes)} slurmd to all idle: {time.monotonic() - t:.1f}s")
        record["complete"] = True
        write_record(paths, record)


def _require_root() -> None:
    if os.geteuid() != 0:
        raise ClusterError("the test cluster needs root (namespaces, /etc/hosts, daemons)")

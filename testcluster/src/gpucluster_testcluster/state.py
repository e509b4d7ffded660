"""What the test cluster knows of itself outside the running daemons: its record on disk (the
spec it was brought up with, its nodes' GPUs), Slurm's word on its nodes (sinfo), the machine's
GPUs shared out among the nodes, and the shared directory the jobs use."""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from . import config, gpus
from .config import ClusterSpec, GpuMode, Paths

HEALTHY_STATES = frozenset({"idle", "mixed", "allocated", "completing"})


@dataclass(frozen=True)
class ClusterInfo:
    """How to reach a running test cluster."""

    slurm_conf: Path
    nodes: tuple[str, ...]
    shared_dir: Path
    partition: str
    cluster_name: str
    gpus_per_node: int
    gpu_mode: GpuMode
    accounting: bool
    state_dir: Path

    def env(self) -> dict[str, str]:
        """``os.environ`` plus ``SLURM_CONF`` pointing at this cluster."""
        return {**os.environ, "SLURM_CONF": str(self.slurm_conf)}


@dataclass(frozen=True)
class NodeState:
    name: str
    state: str
    responding: bool

    @property
    def healthy(self) -> bool:
        return self.responding and self.state in HEALTHY_STATES


def parse_sinfo(text: str) -> list[NodeState]:
    """Parse ``sinfo -h -N -o %N|%t|%T`` output (one line per node and partition)."""
    seen: dict[str, NodeState] = {}
    for line in text.splitlines():
        parts = line.strip().split("|")
        if len(parts) != 3:
            continue
        name, short, long = parts
        # The short form carries the flags: '*' not responding, '~' powered off.
        responding = not short.endswith(("*", "~", "#", "!", "%"))
        seen[name] = NodeState(name=name, state=long.rstrip("*~#!%$@^-").lower(), responding=responding)
    return [seen[k] for k in sorted(seen, key=node_sort_key)]


def node_sort_key(name: str) -> tuple[str, int]:
    digits = name.lstrip("abcdefghijklmnopqrstuvwxyz")
    return (name[: len(name) - len(digits)], int(digits) if digits.isdigit() else 0)


def machine_share(nodes: int) -> dict[str, int]:
    """Real mode: each node advertises its share of this machine's CPUs and memory (a tenth of
    the memory held back for the system), as a GPU node's slurm.conf line would."""
    cpus = max(1, (os.cpu_count() or config.NODE_CPUS) // nodes)
    memory_mb = config.NODE_REAL_MEMORY_MB
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemTotal:"):
                    memory_mb = max(memory_mb, int(line.split()[1]) // 1024 * 9 // 10 // nodes)
    except (OSError, ValueError, IndexError):
        pass
    return {"node_cpus": cpus, "node_memory_mb": memory_mb}


def node_gpus(spec: ClusterSpec, machine: tuple[gpus.Gpu, ...]) -> dict[str, list[dict[str, str]]]:
    """node → its GPUs in the order its jobs number them: device file, and in real mode the PCI bus
    id and UUID (what a tool running on the host needs to reach the same GPU)."""
    by_device = {g.device: g for g in machine}
    out: dict[str, list[dict[str, str]]] = {}
    for i, node in enumerate(spec.node_names):
        out[node] = []
        for device in spec.node_devices(i):
            gpu = by_device.get(device)
            entry = {"device": device}
            if gpu is not None:
                entry.update(bus_id=gpu.bus_id, uuid=gpu.uuid)
            out[node].append(entry)
    return out


def all_idle(states: list[NodeState], nodes: tuple[str, ...]) -> bool:
    return [s.name for s in states] == list(nodes) and all(s.responding and s.state == "idle" for s in states)


def spec_json(spec: ClusterSpec) -> dict[str, Any]:
    d = asdict(spec)
    d.pop("paths")
    # As JSON gives it back, so a running cluster's record compares equal to the same request.
    d["gpuless_nodes"] = list(spec.gpuless_nodes)
    d["gpu_minors"] = list(spec.gpu_minors)
    return d


def read_record(paths: Paths) -> dict[str, Any] | None:
    try:
        data = json.loads(paths.record.read_text())
    except (FileNotFoundError, NotADirectoryError, json.JSONDecodeError):
        return None
    return data if isinstance(data, dict) else None


def write_record(paths: Paths, record: dict[str, Any]) -> None:
    tmp = paths.record.with_suffix(".tmp")
    tmp.write_text(json.dumps(record, indent=2) + "\n")
    tmp.replace(paths.record)


def make_shared_dir(shared: Path) -> list[str]:
    """Create the shared directory (mode 1777); return the dirs created, top first."""
    created: list[str] = []
    missing: list[Path] = []
    p = shared
    while not p.exists():
        missing.append(p)
        p = p.parent
    for d in reversed(missing):
        d.mkdir(mode=0o755)
        if not created:
            created.append(str(d))
    # Jobs may run as any user; the sticky bit keeps them out of each other's files.
    os.chmod(shared, 0o1777)
    return created


def remove_state_dir(state_dir: Path, *, keep_logs: bool) -> None:
    if not state_dir.exists():
        return
    if not keep_logs:
        shutil.rmtree(state_dir, ignore_errors=True)
        return
    for child in state_dir.iterdir():
        if child.name == "log":
            continue
        if child.is_dir() and not child.is_symlink():
            shutil.rmtree(child, ignore_errors=True)
        else:
            child.unlink(missing_ok=True)

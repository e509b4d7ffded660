"""Node inventory: what each node is, read on the node itself.

Every reader takes the root it reads from (``/proc``, ``/sys``, ``/etc``) so the unit tests run it
on recorded trees under ``tests/data/``. GPU facts come from NVML (``nvml_inventory``); a call a
GPU or driver does not support reads ``"n/a"`` instead of failing the whole inventory.

The result is a plain JSON-able dict per node: ``summary`` (flat, one value per fact, the facts
the homogeneity check compares and the report's per-node table shows) plus detail sections.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import json
import os
import platform
import re
import shutil
import subprocess
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_gpucluster.workloads.context import TaskContext
from pytest_gpucluster.workloads.nvml_util import node_gpu_indices

NA = "n/a"
_SUBPROCESS_TIMEOUT_S = 10.0
# Local NVMe, software RAID of NVMe, and the usual scratch mount points are "filesystems of interest".
_LOCAL_DEVICE = re.compile(r"^/dev/(nvme\d+n\d+(p\d+)?|md\d+)$")


@dataclass(frozen=True)
class NodeInventory:
    """One node's facts: ``summary`` is flat (fact → value), the other sections are details."""

    node: str
    summary: dict[str, Any]
    details: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """The dict that goes into the results' ``inventory`` under this node's name."""
        return {"summary": dict(self.summary), **self.details}


# --------------------------------------------------------------------------- small readers


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        return None


def parse_cpulist(text: str) -> list[int]:
    """``"0-3,8,10-11"`` → ``[0, 1, 2, 3, 8, 10, 11]`` (the kernel's cpulist format)."""
    cpus: list[int] = []
    for part in text.strip().split(","):
        if not part:
            continue
        lo, _, hi = part.partition("-")
        cpus.extend(range(int(lo), int(hi or lo) + 1))
    return cpus


def format_cpulist(cpus: Iterable[int]) -> str:
    """The inverse of :func:`parse_cpulist`: consecutive CPUs collapsed into ranges."""
    ranges: list[list[int]] = []
    for cpu in sorted(set(cpus)):
        if ranges and cpu == ranges[-1][1] + 1:
            ranges[-1][1] = cpu
        else:
            ranges.append([cpu, cpu])
    return ",".join(str(lo) if lo == hi else f"{lo}-{hi}" for lo, hi in ranges)


def mask_to_cpulist(words: Iterable[int]) -> str:
    """NVML's CPU affinity (64-bit words, lowest CPUs first) → a cpulist string."""
    return format_cpulist(i * 64 + bit for i, word in enumerate(words) for bit in range(64) if word >> bit & 1)


# --------------------------------------------------------------------------- OS, CPU, memory, NUMA


def read_os(etc_root: Path | str = "/etc", proc_root: Path | str = "/proc") -> dict[str, Any]:
    """Distribution (os-release PRETTY_NAME) and running kernel."""
    release: dict[str, str] = {}
    for line in (_read(Path(etc_root) / "os-release") or "").splitlines():
        key, sep, value = line.partition("=")
        if sep:
            release[key.strip()] = value.strip().strip('"')
    return {
        "os": release.get("PRETTY_NAME", NA),
        "kernel": _read(Path(proc_root) / "sys/kernel/osrelease") or NA,
        "arch": platform.machine() or NA,
    }


def _cpuinfo_blocks(proc_root: Path) -> list[dict[str, str]]:
    blocks: list[dict[str, str]] = [{}]
    for line in (_read(proc_root / "cpuinfo") or "").splitlines():
        if not line.strip():
            blocks.append({})
            continue
        key, _, value = line.partition(":")
        blocks[-1][key.strip()] = value.strip()
    return [b for b in blocks if b]


def read_cpu(proc_root: Path | str = "/proc", sys_root: Path | str = "/sys") -> dict[str, Any]:
    """CPU model and sockets × cores × threads. Topology from sysfs (every architecture has it),
    /proc/cpuinfo where sysfs lacks a CPU's topology."""
    proc_root, sys_root = Path(proc_root), Path(sys_root)
    cpu_dir = sys_root / "devices/system/cpu"
    blocks = _cpuinfo_blocks(proc_root)
    online_text = _read(cpu_dir / "online")
    online = parse_cpulist(online_text) if online_text else [int(b.get("processor", i)) for i, b in enumerate(blocks)]
    by_cpu = {int(b["processor"]): b for b in blocks if b.get("processor", "").isdigit()}
    packages: set[str] = set()
    cores: set[tuple[str, str]] = set()
    for cpu in online:
        topo = cpu_dir / f"cpu{cpu}/topology"
        package = _read(topo / "physical_package_id") or by_cpu.get(cpu, {}).get("physical id", "0")
        core = _read(topo / "core_id") or by_cpu.get(cpu, {}).get("core id", str(cpu))
        packages.add(package)
        cores.add((package, core))
    model = next((b[k] for b in blocks for k in ("model name", "Model name", "cpu model") if b.get(k)), NA)
    sockets = len(packages) or 1
    logical = len(online)
    return {
        "model": model,
        "logical_cpus": logical,
        "sockets": sockets,
        "cores_per_socket": len(cores) // sockets if cores else NA,
        "threads_per_core": logical // len(cores) if cores else NA,
    }


def merge_lscpu(cpu: dict[str, Any], lscpu_json: str) -> dict[str, Any]:
    """Fill facts the sysfs/procfs readers could not find from ``lscpu -J`` output (e.g. the
    model name of ARM CPUs, which /proc/cpuinfo does not carry)."""
    try:
        rows = json.loads(lscpu_json).get("lscpu", [])
    except (ValueError, AttributeError):
        return cpu
    flat: dict[str, str] = {}
    stack = list(rows)
    while stack:
        row = stack.pop()
        if isinstance(row, dict):
            flat[str(row.get("field", "")).rstrip(":")] = str(row.get("data", ""))
            stack.extend(row.get("children", []))
    out = dict(cpu)
    if out.get("model") in (None, NA) and flat.get("Model name"):
        out["model"] = flat["Model name"]
    if flat.get("NUMA node(s)", "").isdigit():
        out["lscpu_numa_nodes"] = int(flat["NUMA node(s)"])
    return out


def lscpu_json(timeout_s: float = _SUBPROCESS_TIMEOUT_S) -> str | None:
    """``lscpu -J`` output, or None where lscpu is missing, fails or takes too long."""
    exe = shutil.which("lscpu")
    if exe is None:
        return None
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        done = subprocess.run([exe, "-J"], capture_output=True, text=True, timeout=timeout_s, check=False)
        if done.returncode == 0:
            return done.stdout
    return None


def read_memory(proc_root: Path | str = "/proc") -> dict[str, Any]:
    """Total host RAM from /proc/meminfo, in GiB."""
    for line in (_read(Path(proc_root) / "meminfo") or "").splitlines():
        if line.startswith("MemTotal:"):
            kib = int(line.split()[1])
            return {"total_gib": round(kib / 2**20, 2)}
    return {"total_gib": NA}


def read_numa(sys_root: Path | str = "/sys") -> list[dict[str, Any]]:
    """NUMA nodes: their CPUs and memory."""
    base = Path(sys_root) / "devices/system/node"
    nodes = []
    for path in sorted(base.glob("node[0-9]*"), key=lambda p: int(p.name[4:])):
        mem_gib: Any = NA
        for line in (_read(path / "meminfo") or "").splitlines():
            if "MemTotal:" in line:
                mem_gib = round(int(line.split()[-2]) / 2**20, 2)
        nodes.append({"node": int(path.name[4:]), "cpus": _read(path / "cpulist") or NA, "memory_gib": mem_gib})
    return nodes


# --------------------------------------------------------------------------- InfiniBand, filesystems


def read_infiniband(sys_root: Path | str = "/sys") -> list[dict[str, Any]]:
    """RDMA devices with firmware, board and per-port state/rate/link layer."""
    devices = []
    for dev in sorted((Path(sys_root) / "class/infiniband").glob("*")):
        ports = []
        for port in sorted((dev / "ports").glob("*"), key=lambda p: int(p.name) if p.name.isdigit() else 0):
            ports.append(
                {
                    "port": int(port.name) if port.name.isdigit() else port.name,
                    "state": _read(port / "state") or NA,
                    "rate": _read(port / "rate") or NA,
                    "link_layer": _read(port / "link_layer") or NA,
                }
            )
        devices.append(
            {
                "device": dev.name,
                "fw_ver": _read(dev / "fw_ver") or NA,
                "board_id": _read(dev / "board_id") or NA,
                "hca_type": _read(dev / "hca_type") or NA,
                "ports": ports,
            }
        )
    return devices


def _unescape(field_text: str) -> str:
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field_text)


def read_mounts(
    proc_root: Path | str = "/proc",
    paths: Iterable[str] = ("/", "/tmp"),
    statvfs: Callable[[str], os.statvfs_result] | None = os.statvfs,
) -> list[dict[str, Any]]:
    """The mounts holding ``paths`` (shared fs, /tmp, /) and every local NVMe mount, with size.
    ``statvfs=None`` skips sizes (recorded trees have no real mount points)."""
    mounts: list[tuple[str, str, str]] = []
    for line in (_read(Path(proc_root) / "mounts") or "").splitlines():
        parts = line.split()
        if len(parts) >= 3:
            mounts.append((_unescape(parts[0]), _unescape(parts[1]), parts[2]))
    wanted: dict[str, list[str]] = {}
    for path in paths:
        holder = max(
            (m for m in mounts if path == m[1] or path.startswith(m[1].rstrip("/") + "/")),
            key=lambda m: len(m[1]),
            default=None,
        )
        if holder is not None:
            wanted.setdefault(holder[1], []).append(path)
    for device, mountpoint, _ in mounts:
        if _LOCAL_DEVICE.match(device):
            wanted.setdefault(mountpoint, [])
    out = []
    for device, mountpoint, fstype in mounts:
        if mountpoint not in wanted:
            continue
        entry: dict[str, Any] = {
            "mountpoint": mountpoint,
            "device": device,
            "fstype": fstype,
            "holds": wanted.pop(mountpoint),
            "size_gib": NA,
            "free_gib": NA,
        }
        if statvfs is not None:
            with contextlib.suppress(OSError):
                st = statvfs(mountpoint)
                entry["size_gib"] = round(st.f_blocks * st.f_frsize / 2**30, 1)
                entry["free_gib"] = round(st.f_bavail * st.f_frsize / 2**30, 1)
        out.append(entry)
    return out


# --------------------------------------------------------------------------- software versions


def slurm_version(env: Mapping[str, str], timeout_s: float = _SUBPROCESS_TIMEOUT_S) -> str:
    """Slurm's version as the node sees it: ``SLURM_VERSION`` if set, else ``srun --version``."""
    if env.get("SLURM_VERSION"):
        return env["SLURM_VERSION"]
    exe = shutil.which("srun")
    if exe is None:
        return NA
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        done = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=timeout_s, check=False)
        words = done.stdout.split()
        if done.returncode == 0 and words:
            return words[-1]
    return NA


def read_versions(env: Mapping[str, str], *, gpus: bool = True) -> dict[str, Any]:
    """Python, torch and NCCL (NCCL only where CUDA is usable: the CPU wheel has none) and Slurm.
    Without GPUs torch is not imported at all: its import costs seconds of CPU on every node."""
    versions: dict[str, Any] = {"python": platform.python_version(), "torch": NA, "nccl": NA}
    with contextlib.suppress(importlib.metadata.PackageNotFoundError):
        versions["torch"] = importlib.metadata.version("torch")
    with contextlib.suppress(Exception):  # a broken CUDA install must not lose the inventory
        if not gpus:
            raise LookupError("no GPU: no NCCL to ask")
        import torch

        if torch.cuda.is_available():
            nccl = torch.cuda.nccl.version()  # type: ignore[no-untyped-call]
            versions["nccl"] = ".".join(str(p) for p in nccl) if isinstance(nccl, tuple) else str(nccl)
    versions["slurm"] = slurm_version(env)
    return versions


# --------------------------------------------------------------------------- GPUs (NVML)

# NVML's common-ancestor levels, named as ``nvidia-smi topo -m`` names them.
_ANCESTOR = {0: "BOARD", 10: "PIX", 20: "PXB", 30: "PHB", 40: "NODE", 50: "SYS"}
_NVLINK_TO_SWITCH = 2  # nvmlDeviceGetNvLinkRemoteDeviceType: 0 GPU, 1 IBM NPU, 2 NVSwitch


def cuda_version(code: int) -> str:
    """NVML's CUDA driver version integer (12040) → ``"12.4"``."""
    return f"{code // 1000}.{code % 1000 // 10}"


def pci_sysfs_name(bus_id: str) -> str:
    """NVML's ``00000000:18:00.0`` → sysfs's ``0000:18:00.0``."""
    return bus_id.lower()[-12:]


def pair_label(direct_links: int, switch_links: tuple[int, int], ancestor: int | None) -> str:
    """How two GPUs talk, as ``nvidia-smi topo -m`` says it: ``NV<n>`` over NVLink (direct, or
    through NVSwitches, where the lower of the two GPUs' switch link counts is the width), else
    the PCIe path (PIX, PXB, PHB, NODE, SYS)."""
    if direct_links > 0:
        return f"NV{direct_links}"
    if min(switch_links) > 0:
        return f"NV{min(switch_links)}"
    return _ANCESTOR.get(ancestor, NA) if ancestor is not None else NA


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def nvml_inventory(sys_root: Path | str = "/sys") -> dict[str, Any]:
    """GPU model/count/UUIDs/driver/CUDA/VBIOS/MIG mode, GPU↔NUMA/CPU affinity and the link
    between every GPU pair. No NVML (no driver, no GPU): empty sections and the reason."""
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception as exc:  # library missing, driver not loaded: a node without GPUs
        return {"gpus": [], "gpu_system": {"nvml": f"unavailable ({type(exc).__name__})"}, "gpu_topology": {}}
    try:
        return _nvml_facts(pynvml, Path(sys_root))
    finally:
        with contextlib.suppress(Exception):
            pynvml.nvmlShutdown()


def _nvml_facts(nvml: Any, sys_root: Path) -> dict[str, Any]:
    def get(fn: str, *args: Any) -> Any:
        try:
            return getattr(nvml, fn)(*args)
        except (nvml.NVMLError, AttributeError, TypeError, ValueError):  # unsupported here: "n/a"
            return NA

    system = {"driver": _text(get("nvmlSystemGetDriverVersion")), "nvml": "ok"}
    code = get("nvmlSystemGetCudaDriverVersion_v2")
    system["cuda"] = cuda_version(code) if isinstance(code, int) else NA
    count = get("nvmlDeviceGetCount")
    indices = node_gpu_indices(count if isinstance(count, int) else 0)  # the node's GPUs, nvidia-smi's numbers
    handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in indices]
    words = max(1, -(-(os.cpu_count() or 1) // 64))
    gpus: list[dict[str, Any]] = []
    remote: list[list[str]] = []
    switch_links: list[int] = []
    for i, h in enumerate(handles):
        pci = get("nvmlDeviceGetPciInfo", h)
        bus = _text(pci.busId) if pci != NA else NA
        sysfs = sys_root / "bus/pci/devices" / pci_sysfs_name(bus) if bus != NA else None
        numa = get("nvmlDeviceGetNumaNodeId", h)
        if not isinstance(numa, int) and sysfs is not None:
            numa = int(_read(sysfs / "numa_node") or -1)
        affinity = get("nvmlDeviceGetCpuAffinity", h, words)
        cpus = mask_to_cpulist(affinity) if affinity != NA else (_read(sysfs / "local_cpulist") if sysfs else None)
        mig = get("nvmlDeviceGetMigMode", h)
        memory = get("nvmlDeviceGetMemoryInfo", h)
        links: list[str] = []
        to_switch = 0
        for link in range(getattr(nvml, "NVML_NVLINK_MAX_LINKS", 18)):
            if get("nvmlDeviceGetNvLinkState", h, link) != 1:
                continue
            if get("nvmlDeviceGetNvLinkRemoteDeviceType", h, link) == _NVLINK_TO_SWITCH:
                to_switch += 1
            else:
                far = get("nvmlDeviceGetNvLinkRemotePciInfo", h, link)
                links.append(pci_sysfs_name(_text(far.busId)) if far != NA else NA)
        remote.append(links)
        switch_links.append(to_switch)
        gpus.append(
            {
                "index": indices[i],
                "name": _text(get("nvmlDeviceGetName", h)),
                "uuid": _text(get("nvmlDeviceGetUUID", h)),
                "serial": _text(get("nvmlDeviceGetSerial", h)),
                "pci_bus_id": bus,
                "memory_mib": memory.total // 2**20 if memory != NA else NA,
                "vbios": _text(get("nvmlDeviceGetVbiosVersion", h)),
                "mig_mode": ("enabled" if mig[0] else "disabled") if isinstance(mig, list | tuple) else NA,
                "numa_node": numa if isinstance(numa, int) and numa >= 0 else NA,
                "cpu_affinity": cpus or NA,
                "nvlink_active": len(links) + to_switch,
            }
        )
    topology: dict[str, str] = {}
    for i in range(len(handles)):
        for j in range(i + 1, len(handles)):
            direct = remote[i].count(pci_sysfs_name(gpus[j]["pci_bus_id"]))
            level = get("nvmlDeviceGetTopologyCommonAncestor", handles[i], handles[j])
            topology[f"{indices[i]}-{indices[j]}"] = pair_label(
                direct, (switch_links[i], switch_links[j]), level if isinstance(level, int) else None
            )
    return {"gpus": gpus, "gpu_system": system, "gpu_topology": topology}


# --------------------------------------------------------------------------- summary


def _one_or_mixed(values: Iterable[Any]) -> Any:
    """The value all items share (its own type kept), else ``"mixed: a, b"``."""
    items = list(values)
    distinct = sorted({str(v) for v in items})
    if not distinct:
        return NA
    return items[0] if len(distinct) == 1 else "mixed: " + ", ".join(distinct)


def summarise(details: Mapping[str, Any]) -> dict[str, Any]:
    """The flat facts of one node, from its detail sections."""
    cpu, gpus, ib = details["cpu"], details["gpus"], details["infiniband"]
    gpu_info = details.get("gpu_system", {})
    labels = list(details.get("gpu_topology", {}).values())
    interconnect = ", ".join(f"{label}×{labels.count(label)}" for label in sorted(set(labels))) or NA
    return {
        "os": details["os"]["os"],
        "kernel": details["os"]["kernel"],
        "cpu_model": cpu["model"],
        "cpu_topology": f"{cpu['sockets']}x{cpu['cores_per_socket']}x{cpu['threads_per_core']}",
        "logical_cpus": cpu["logical_cpus"],
        "memory_gib": details["memory"]["total_gib"],
        "numa_nodes": len(details["numa"]) or NA,
        "gpu_model": _one_or_mixed(g["name"] for g in gpus) if gpus else "none",
        "gpu_count": len(gpus),
        "gpu_memory_mib": _one_or_mixed(g["memory_mib"] for g in gpus) if gpus else NA,
        "driver": gpu_info.get("driver", NA),
        "cuda": gpu_info.get("cuda", NA),
        "vbios": _one_or_mixed(g["vbios"] for g in gpus) if gpus else NA,
        "mig_mode": _one_or_mixed(g["mig_mode"] for g in gpus) if gpus else NA,
        "gpu_interconnect": interconnect,
        "nccl": details["versions"]["nccl"],
        "torch": details["versions"]["torch"],
        "slurm": details["versions"]["slurm"],
        "ib_devices": len(ib),
        "ib_firmware": _one_or_mixed(d["fw_ver"] for d in ib) if ib else NA,
        "ib_active_ports": sum(1 for d in ib for p in d["ports"] if "ACTIVE" in str(p["state"])),
    }


def node_name(ctx: TaskContext) -> str:
    """The scheduler's name for this task's node (what the tests are parametrised by)."""
    if 0 <= ctx.node_rank < len(ctx.hostnames):
        return ctx.hostnames[ctx.node_rank]
    return ctx.hostname


def collect(
    node: str,
    *,
    proc_root: Path | str = "/proc",
    sys_root: Path | str = "/sys",
    etc_root: Path | str = "/etc",
    fs_paths: Iterable[str] = ("/", "/tmp"),
    env: Mapping[str, str] | None = None,
    with_nvml: bool = True,
    with_tools: bool = True,
) -> NodeInventory:
    """Everything about this node. ``with_nvml``/``with_tools`` off: only the file readers (tests)."""
    env = os.environ if env is None else env
    cpu = read_cpu(proc_root, sys_root)
    if with_tools:
        text = lscpu_json()
        if text:
            cpu = merge_lscpu(cpu, text)
    details: dict[str, Any] = {
        "hostname": platform.node(),
        "os": read_os(etc_root, proc_root),
        "cpu": cpu,
        "memory": read_memory(proc_root),
        "numa": read_numa(sys_root),
        "infiniband": read_infiniband(sys_root),
        "filesystems": read_mounts(proc_root, fs_paths, os.statvfs if with_tools else None),
        "gpus": [],
        "gpu_system": {},
        "gpu_topology": {},
    }
    if with_nvml:
        details.update(nvml_inventory(sys_root))
    details["versions"] = (
        read_versions(env, gpus=bool(details["gpus"]))
        if with_tools
        else {"python": platform.python_version(), "torch": NA, "nccl": NA, "slurm": NA}
    )
    return NodeInventory(node=node, summary=summarise(details), details=details)


def node_inventory(ctx: TaskContext, *, shared_fs: str | None = None) -> NodeInventory | None:
    """Workload: one task per node reports its node (other tasks of the node return None)."""
    if ctx.local_rank != 0:
        return None
    paths = ["/", "/tmp"] + ([shared_fs] if shared_fs else [])
    return collect(node_name(ctx), fs_paths=paths)

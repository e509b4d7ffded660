"""Inventory readers on recorded trees (tests/data/inventory_vm: this project's CI machine) and on a
small 2-socket tree with InfiniBand built here."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_gpucluster.workloads import inventory as inv

DATA = Path(__file__).parent.parent / "data"
VM = DATA / "inventory_vm"


def _write(root: Path, rel: str, text: str) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n")


@pytest.fixture
def two_socket(tmp_path: Path) -> Path:
    """2 sockets x 2 cores x 2 threads, 2 NUMA nodes, two NDR HCAs (one port down)."""
    cpu = 0
    blocks = []
    for _thread in range(2):
        for socket in range(2):
            for core in range(2):
                base = f"sys/devices/system/cpu/cpu{cpu}/topology"
                _write(tmp_path, f"{base}/physical_package_id", str(socket))
                _write(tmp_path, f"{base}/core_id", str(core))
                blocks.append(
                    f"processor\t: {cpu}\nmodel name\t: Intel(R) Xeon(R) Platinum 8468\n"
                    f"physical id\t: {socket}\ncore id\t\t: {core}\n"
                )
                cpu += 1
    _write(tmp_path, "sys/devices/system/cpu/online", "0-7")
    _write(tmp_path, "proc/cpuinfo", "\n".join(blocks))
    _write(tmp_path, "proc/meminfo", "MemTotal:       2113492648 kB\nMemFree:        2000000000 kB")
    _write(tmp_path, "proc/sys/kernel/osrelease", "5.15.0-119-generic")
    _write(tmp_path, "etc/os-release", 'NAME="Ubuntu"\nPRETTY_NAME="Ubuntu 22.04.4 LTS"\nVERSION_ID="22.04"')
    for node, cpus in ((0, "0-1,4-5"), (1, "2-3,6-7")):
        _write(tmp_path, f"sys/devices/system/node/node{node}/cpulist", cpus)
        _write(
            tmp_path,
            f"sys/devices/system/node/node{node}/meminfo",
            f"Node {node} MemTotal:       1056746324 kB\nNode {node} MemFree:        1000000000 kB",
        )
    for dev, state in (("mlx5_0", "4: ACTIVE"), ("mlx5_1", "1: DOWN")):
        base = f"sys/class/infiniband/{dev}"
        _write(tmp_path, f"{base}/fw_ver", "28.39.2048")
        _write(tmp_path, f"{base}/board_id", "MT_0000000838")
        _write(tmp_path, f"{base}/hca_type", "MT4129")
        _write(tmp_path, f"{base}/ports/1/state", state)
        _write(tmp_path, f"{base}/ports/1/rate", "400 Gb/sec (4X NDR)")
        _write(tmp_path, f"{base}/ports/1/link_layer", "InfiniBand")
    return tmp_path


def test_cpulist_round_trip():
    assert inv.parse_cpulist("0-3,8,10-11") == [0, 1, 2, 3, 8, 10, 11]
    assert inv.format_cpulist([11, 0, 1, 2, 3, 8, 10]) == "0-3,8,10-11"
    assert inv.format_cpulist([]) == ""


def test_nvml_affinity_mask_to_cpulist():
    # Words are 64 CPUs each, lowest first: bits 48-63 + 0-31 of words 0-1, the same of words 2-3.
    words = [0xFFFF_0000_0000_0000, 0xFFFF_FFFF, 0xFFFF_0000_0000_0000, 0xFFFF_FFFF]
    assert inv.mask_to_cpulist(words) == "48-95,176-223"


def test_recorded_ci_machine():
    summary = inv.collect(
        "vm", proc_root=VM / "proc", sys_root=VM / "sys", etc_root=VM / "etc", with_nvml=False, with_tools=False
    ).summary
    assert summary["os"] == "Debian GNU/Linux 12 (bookworm)"
    assert summary["kernel"] == "6.18.44-fc-v669"
    assert summary["cpu_model"] == "AMD EPYC"
    assert summary["cpu_topology"] == "1x2x1"
    assert summary["logical_cpus"] == 2
    assert summary["memory_gib"] == pytest.approx(23.54, abs=0.01)
    assert summary["numa_nodes"] == 1
    assert (summary["gpu_model"], summary["gpu_count"], summary["driver"]) == ("none", 0, "n/a")
    assert summary["ib_devices"] == 0


def test_two_socket_topology_numa_and_ib(two_socket: Path):
    cpu = inv.read_cpu(two_socket / "proc", two_socket / "sys")
    assert cpu == {
        "model": "Intel(R) Xeon(R) Platinum 8468",
        "logical_cpus": 8,
        "sockets": 2,
        "cores_per_socket": 2,
        "threads_per_core": 2,
    }
    numa = inv.read_numa(two_socket / "sys")
    assert [(n["node"], n["cpus"]) for n in numa] == [(0, "0-1,4-5"), (1, "2-3,6-7")]
    assert numa[0]["memory_gib"] == pytest.approx(1007.79, abs=0.01)
    ib = inv.read_infiniband(two_socket / "sys")
    assert [d["device"] for d in ib] == ["mlx5_0", "mlx5_1"]
    port = {"port": 1, "state": "4: ACTIVE", "rate": "400 Gb/sec (4X NDR)", "link_layer": "InfiniBand"}
    assert ib[0]["ports"] == [port]
    summary = inv.collect(
        "worker0",
        proc_root=two_socket / "proc",
        sys_root=two_socket / "sys",
        etc_root=two_socket / "etc",
        with_nvml=False,
        with_tools=False,
    ).summary
    assert summary["cpu_topology"] == "2x2x2"
    assert summary["os"] == "Ubuntu 22.04.4 LTS"
    assert summary["memory_gib"] == pytest.approx(2015.58, abs=0.01)
    assert (summary["ib_devices"], summary["ib_firmware"], summary["ib_active_ports"]) == (2, "28.39.2048", 1)


def test_topology_from_cpuinfo_where_sysfs_lacks_it(two_socket: Path):
    for path in (two_socket / "sys/devices/system/cpu").glob("cpu*/topology/*"):
        path.unlink()
    cpu = inv.read_cpu(two_socket / "proc", two_socket / "sys")
    assert (cpu["sockets"], cpu["cores_per_socket"], cpu["threads_per_core"]) == (2, 2, 2)


def test_lscpu_fills_the_model_of_an_arm_cpu():
    cpu = {"model": "n/a", "logical_cpus": 2}
    lscpu = json.dumps(
        {
            "lscpu": [
                {"field": "Architecture:", "data": "aarch64"},
                {"field": "Vendor ID:", "data": "ARM", "children": [{"field": "Model name:", "data": "Neoverse-V2"}]},
                {"field": "NUMA node(s):", "data": "1"},
            ]
        }
    )
    merged = inv.merge_lscpu(cpu, lscpu)
    assert merged["model"] == "Neoverse-V2"
    assert merged["lscpu_numa_nodes"] == 1
    assert inv.merge_lscpu(cpu, "not json") == cpu
    recorded = inv.merge_lscpu({"model": "n/a"}, (VM / "lscpu.json").read_text())
    assert recorded["model"] == "AMD EPYC"


def test_mounts_of_interest(tmp_path: Path):
    (tmp_path / "mounts").write_text((DATA / "inventory_h100_mounts.txt").read_text())
    found = inv.read_mounts(tmp_path, ["/", "/tmp", "/mnt/sharedfs/jobs", "/home/with space/x"], statvfs=None)
    by_mount = {m["mountpoint"]: m for m in found}
    assert by_mount["/mnt/sharedfs"]["fstype"] == "virtiofs"
    assert by_mount["/mnt/sharedfs"]["holds"] == ["/mnt/sharedfs/jobs"]
    assert by_mount["/tmp"]["fstype"] == "tmpfs"
    assert by_mount["/"]["device"] == "/dev/vda1"
    assert by_mount["/mnt/local-nvme"]["device"] == "/dev/md0"  # local NVMe RAID, listed unasked
    assert by_mount["/var/lib/containers"]["device"] == "/dev/nvme8n1"
    assert by_mount["/home/with space"]["holds"] == ["/home/with space/x"]
    assert "/run" not in by_mount
    assert by_mount["/"]["size_gib"] == "n/a"


def test_mount_sizes_from_statvfs_of_this_machine():
    (root,) = [m for m in inv.read_mounts("/proc", ["/"]) if m["mountpoint"] == "/"]
    assert isinstance(root["size_gib"], float)
    assert root["size_gib"] > 0


@pytest.mark.parametrize(
    ("direct", "switch", "ancestor", "label"),
    [
        (0, (18, 18), 50, "NV18"),  # HGX: every link goes to NVSwitches
        (0, (18, 12), 50, "NV12"),  # one GPU lost links: the pair runs at the narrower width
        (4, (0, 0), 30, "NV4"),  # direct NVLink bridge
        (0, (0, 0), 10, "PIX"),
        (0, (0, 0), 40, "NODE"),
        (0, (0, 0), 50, "SYS"),
        (0, (0, 0), None, "n/a"),
    ],
)
def test_pair_label(direct, switch, ancestor, label):
    assert inv.pair_label(direct, switch, ancestor) == label


def test_small_conversions():
    assert inv.cuda_version(12040) == "12.4"
    assert inv.cuda_version(12060) == "12.6"
    assert inv.pci_sysfs_name("00000000:18:00.0") == "0000:18:00.0"


def test_summary_of_gpu_details_reports_mixed_values():
    details = {
        "os": {"os": "Ubuntu", "kernel": "5.15"},
        "cpu": {"model": "x", "sockets": 2, "cores_per_socket": 48, "threads_per_core": 2, "logical_cpus": 192},
        "memory": {"total_gib": 2015.5},
        "numa": [{}, {}],
        "infiniband": [],
        "versions": {"nccl": "2.21.5", "torch": "2.5.1", "slurm": "24.05.3"},
        "gpu_system": {"driver": "560.35.03", "cuda": "12.6"},
        "gpus": [
            {"name": "NVIDIA H100 80GB HBM3", "memory_mib": 81559, "vbios": v, "mig_mode": "disabled"}
            for v in ("96.00.99.00.01", "96.00.99.00.01", "96.00.74.00.0D")
        ],
        "gpu_topology": {"0-1": "NV18", "0-2": "NV18", "1-2": "NV12"},
    }
    s = inv.summarise(details)
    assert s["gpu_count"] == 3
    assert s["gpu_model"] == "NVIDIA H100 80GB HBM3"
    assert s["vbios"] == "mixed: 96.00.74.00.0D, 96.00.99.00.01"
    assert s["gpu_interconnect"] == "NV12×1, NV18×2"
    assert s["cpu_topology"] == "2x48x2"


def test_nvml_without_a_driver_gives_empty_sections():
    # This machine has no NVIDIA driver: the inventory must still come back, saying why.
    facts = inv.nvml_inventory()
    assert facts["gpus"] == []
    assert facts["gpu_system"]["nvml"].startswith("unavailable")

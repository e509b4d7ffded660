"""Each GPU's NUMA node and nearest NIC: read from a sysfs tree, placed by NVML's index, and judged
against the profile's layout or the majority of the nodes (checks/gpu_placement.py)."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import pytest

from pytest_gpucluster.checks import gpu_placement, node_config, node_gpu_config
from pytest_gpucluster.checks.gpu_placement import GpuPlacement
from pytest_gpucluster.config import load
from pytest_gpucluster.config.node_config import NodeConfig
from pytest_gpucluster.errors import ConfigError
from pytest_gpucluster.workloads import gpu_modes, pci_acs
from pytest_gpucluster.workloads.node_settings import NodeSettings
from pytest_gpucluster.workloads.pci_acs import PciDevice

DATA = Path(__file__).resolve().parents[1] / "data" / "node_config"
SOCKETS = (0, 0, 0, 0, 1, 1, 1, 1)


def _layout(numa=SOCKETS, nics=tuple(f"mlx5_{i}" for i in range(8))) -> tuple[PciDevice, ...]:
    """Eight GPUs, each below a PCIe switch of its own with one NIC, four switches per socket:
    the switch's upstream port 0000:B+1:00.0 under root port 0000:B:01.0 of host bridge pci0000:B."""
    out = []
    for i in range(8):
        b = 0x10 + 0x10 * i
        up = (f"pci0000:{b:02x}", f"0000:{b:02x}:01.0", f"0000:{b + 1:02x}:00.0")
        out.append(PciDevice("gpu", f"0000:{b + 3:02x}:00.0", numa[i], (*up, f"0000:{b + 2:02x}:00.0")))
        out.append(PciDevice("nic", f"0000:{b + 4:02x}:00.0", numa[i], (*up, f"0000:{b + 2:02x}:01.0"), nics[i]))
    return tuple(out)


def _node(name: str, devices: tuple[PciDevice, ...] = (), **more) -> NodeSettings:
    return NodeSettings(name, acs=pci_acs.AcsReading(devices), **more)


def _cluster(n: int = 16, **odd: tuple[PciDevice, ...]) -> dict[str, NodeSettings]:
    return {f"node{i}": _node(f"node{i}", odd.get(f"node{i}", _layout())) for i in range(1, n + 1)}


# --- reading and placing ----------------------------------------------------------------------


def _device(root: Path, path: str, cls: str, vendor: str, numa: int = -1) -> Path:
    where = root / "devices" / path
    where.mkdir(parents=True, exist_ok=True)
    (where / "class").write_text(cls + "\n")
    (where / "vendor").write_text(vendor + "\n")
    (where / "numa_node").write_text(f"{numa}\n")
    (where / "config").write_bytes(bytes(4096))
    link = root / "bus/pci/devices" / Path(path).name
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(os.path.relpath(where, link.parent))
    return where


def test_each_gpu_is_placed_by_the_switch_it_shares_with_a_nic(tmp_path):
    # Socket 0: GPU 0000:18 and mlx5_0 below one switch; GPU 0000:2a below another switch with no
    # NIC, on the same host bridge as mlx5_1. Socket 1: GPU 0000:9a alone on its host bridge, mlx5_2
    # on another host bridge of that socket.
    sw0 = "pci0000:15/0000:15:01.0/0000:16:00.0"
    _device(tmp_path, sw0, "0x060400", "0x1000", 0)
    _device(tmp_path, f"{sw0}/0000:17:00.0", "0x060400", "0x1000", 0)
    _device(tmp_path, f"{sw0}/0000:17:00.0/0000:18:00.0", "0x030200", "0x10de", 0)
    _device(tmp_path, f"{sw0}/0000:17:01.0", "0x060400", "0x1000", 0)
    nic = _device(tmp_path, f"{sw0}/0000:17:01.0/0000:19:00.0", "0x020700", "0x15b3", 0)
    (nic / "infiniband/mlx5_0").mkdir(parents=True)
    _device(tmp_path, "pci0000:27/0000:27:01.0/0000:28:00.0/0000:29:00.0/0000:2a:00.0", "0x030200", "0x10de", 0)
    nic = _device(tmp_path, "pci0000:27/0000:27:02.0/0000:2b:00.0", "0x020000", "0x15b3", 0)
    (nic / "infiniband/mlx5_1").mkdir(parents=True)
    _device(tmp_path, "pci0000:97/0000:97:01.0/0000:9a:00.0", "0x030200", "0x10de", 1)
    nic = _device(tmp_path, "pci0000:a7/0000:a7:01.0/0000:a8:00.0", "0x020700", "0x15b3", 1)
    (nic / "infiniband/mlx5_2").mkdir(parents=True)
    gpus = gpu_modes.GpuModes(
        tuple(
            gpu_modes.GpuMode(i, pci_bus_id=b) for i, b in enumerate(("0000:18:00.0", "0000:2a:00.0", "0000:9a:00.0"))
        )
    )
    node = NodeSettings("node1", acs=pci_acs.read(tmp_path), gpus=gpus)
    assert gpu_placement.placements(node) == (
        GpuPlacement(0, "0000:18:00.0", 0, "mlx5_0", 0, "PCIe bridge 0000:16:00.0"),
        GpuPlacement(1, "0000:2a:00.0", 0, "mlx5_1", 0, "host bridge pci0000:27"),
        GpuPlacement(2, "0000:9a:00.0", 1, "mlx5_2", 1, "NUMA node 1"),
    )
    # A node that is part of the machine: NVML lists its GPUs, the others are another node's.
    half = dataclasses.replace(node, gpus=gpu_modes.GpuModes((gpu_modes.GpuMode(0, pci_bus_id="0000:9a:00.0"),)))
    assert [(p.index, p.bdf) for p in gpu_placement.placements(half)] == [(0, "0000:9a:00.0")]
    # Without NVML's bus ids the PCI order numbers the GPUs, as NVML does.
    blind = dataclasses.replace(node, gpus=gpu_modes.GpuModes(error="NVML unusable"))
    assert [(p.index, p.bdf) for p in gpu_placement.placements(blind)] == [
        (0, "0000:18:00.0"),
        (1, "0000:2a:00.0"),
        (2, "0000:9a:00.0"),
    ]


def test_nvml_bus_ids_read_as_sysfs_names_them():
    # '00000000:00:06.0' is what nvmlDeviceGetPciInfo gave for the H200 test machine's GPU, whose
    # sysfs entry is /sys/bus/pci/devices/0000:00:06.0.
    assert gpu_modes.bus_id("00000000:00:06.0") == "0000:00:06.0"
    assert gpu_modes.bus_id(b"00000000:9A:00.0") == "0000:9a:00.0"
    assert gpu_modes.bus_id("") == gpu_modes.bus_id("garbage") == ""


# --- judged against the other nodes -----------------------------------------------------------


def test_a_gpu_on_another_numa_node_than_on_15_of_16_nodes_fails_on_that_node():
    nodes = _cluster(node7=_layout(numa=(0, 0, 0, 1, 1, 1, 1, 1)))
    (f,) = gpu_placement.gpu_placement(nodes, "node7", NodeConfig()).findings
    assert (f.scope, f.setting, f.gpu, f.severity, f.convicts) == (
        "node_setting",
        "GPU NUMA node",
        3,
        "fail",
        ("node7",),
    )
    assert f.text.startswith("node7:gpu3: NUMA node 1, expected 0 (15 of 16 nodes): ")
    assert "GPUDirect RDMA" in f.text and "between the sockets" in f.text
    assert (f.found, f.expected) == ("1", "0 (15 of 16 nodes)")
    assert "riser" in f.remedy and "BIOS" in f.remedy and "node_config.gpu_numa_nodes" in f.remedy
    assert gpu_placement.gpu_placement(nodes, "node8", NodeConfig()) == node_config.Judged()


def test_a_gpu_nearest_another_nic_than_on_its_peers_fails():
    swapped = ("mlx5_3", "mlx5_1", "mlx5_2", "mlx5_0", "mlx5_4", "mlx5_5", "mlx5_6", "mlx5_7")
    nodes = _cluster(node7=_layout(nics=swapped))
    found = gpu_placement.gpu_placement(nodes, "node7", NodeConfig()).findings
    assert [(f.gpu, f.setting, f.severity) for f in found] == [
        (0, "GPU's nearest NIC", "fail"),
        (3, "GPU's nearest NIC", "fail"),
    ]
    assert found[1].text.startswith(
        "node7:gpu3: nearest NIC mlx5_0 (through PCIe bridge 0000:41:00.0), expected mlx5_3 (15 of 16 nodes): "
    )
    assert "node_config.gpu_nics" in found[1].remedy and "cabling" in found[1].remedy


def test_nodes_split_with_no_majority_warn_naming_the_split_and_convict_none():
    nodes = _cluster(4, node3=_layout(numa=(0, 0, 0, 1, 1, 1, 1, 1)), node4=_layout(numa=(0, 0, 0, 1, 1, 1, 1, 1)))
    (f,) = gpu_placement.gpu_placement(nodes, "node3", NodeConfig()).findings
    assert (f.scope, f.severity, f.convicts, f.nodes) == ("nodes", "warn", (), ("node3", "node1", "node2", "node4"))
    assert "no majority" in f.text and "0 on node[1-2]; 1 on node[3-4]" in f.text
    assert "node_config.gpu_numa_nodes" in f.text
    assert gpu_placement.gpu_placement(nodes, "node1", NodeConfig()).findings[0].severity == "warn"


# --- judged against the profile ---------------------------------------------------------------


def test_the_profiles_layout_judges_even_one_node_and_outweighs_the_majority():
    stated = NodeConfig(gpu_numa_nodes={"3": 1}, gpu_nics={"0": "mlx5_0"})
    (f,) = gpu_placement.gpu_placement(_cluster(1), "node1", stated).findings
    assert f.text.startswith("node1:gpu3: NUMA node 0, expected 1 (the profile's node_config.gpu_numa_nodes): ")
    # Every node alike, and all of them off the profile's layout: each node is named.
    nodes = _cluster(3)
    assert [f.gpu for f in gpu_placement.gpu_placement(nodes, "node2", stated).findings] == [3]
    intended = NodeConfig(gpu_numa_nodes={"3": 1})
    odd = _cluster(3, node2=_layout(numa=(0, 0, 0, 1, 1, 1, 1, 1)))
    assert gpu_placement.gpu_placement(odd, "node2", intended) == node_config.Judged()


def test_the_profile_keys_are_read_and_a_bad_one_is_named(tmp_path: Path):
    path = tmp_path / "t.toml"
    head = "[profiles.x]\ngpus_per_node = 8\n[profiles.x.node_config]\n"
    path.write_text(head + 'gpu_numa_nodes = {0 = 0, 4 = 1}\ngpu_nics = {0 = "mlx5_0", 4 = "mlx5_4"}\n')
    cfg = load(path).profile("x").node_config
    assert (dict(cfg.gpu_numa_nodes), dict(cfg.gpu_nics)) == ({"0": 0, "4": 1}, {"0": "mlx5_0", "4": "mlx5_4"})
    for bad, message in (
        ("gpu_numa_nodes = {gpu0 = 0}", r"t\.toml: profiles\.x\.node_config: gpu_numa_nodes: keys are GPU indices"),
        ("gpu_numa_nodes = {0 = -1}", r"profiles\.x\.node_config: gpu_numa_nodes\.0: a NUMA node, 0 or more"),
        ("gpu_numa_nodes = [0, 1]", r"profiles\.x\.node_config\.gpu_numa_nodes: expected a table of whole numbers"),
        ('gpu_nics = {3 = ""}', r"profiles\.x\.node_config: gpu_nics\.3: name the NIC's RDMA device"),
    ):
        path.write_text(head + bad + "\n")
        with pytest.raises(ConfigError, match=message):
            load(path)


# --- what a node cannot show ------------------------------------------------------------------


def test_the_h200_vm_has_nothing_to_place_its_gpu_by():
    # The H200 test machine as sysfs shows it: the GPU on the root bus, numa_node -1, a virtio NIC
    # (not an RDMA NIC) beside it.
    gpu = PciDevice("gpu", "0000:00:06.0", -1, ("pci0000:00",))
    vm = _node("node1", (gpu,), virtual_machine="the CPU reports the hypervisor flag")
    why = gpu_placement.gpu_placement(
        {"node1": vm, "node2": dataclasses.replace(vm, node="node2")}, "node1", NodeConfig()
    )
    assert why.findings == ()
    assert "no NUMA node" in why.not_applicable and "no RDMA NIC" in why.not_applicable
    assert "hypervisor" in why.not_applicable
    # A profile that states the layout is not answered by a node that cannot show it: not judged.
    (f,) = gpu_placement.gpu_placement({"node1": vm}, "node1", NodeConfig(gpu_numa_nodes={"0": 0})).findings
    assert (f.severity, f.gpu) == ("not_judged", 0) and "numa_node -1" in f.text and "gpu_numa_nodes (0)" in f.text
    assert "no GPU on PCIe" in gpu_placement.gpu_placement({"n": _node("n")}, "n", NodeConfig()).not_applicable


def test_one_node_without_nics_and_no_profile_layout_has_nothing_to_compare_with():
    gpus_only = tuple(d for d in _layout() if d.kind == "gpu")
    alone = gpu_placement.gpu_placement({"node1": _node("node1", gpus_only)}, "node1", NodeConfig())
    assert alone.findings == () and "nothing to compare" in alone.not_applicable
    two = {n: _node(n, gpus_only) for n in ("node1", "node2")}
    assert gpu_placement.gpu_placement(two, "node1", NodeConfig()) == node_config.Judged()


def test_a_gpu_without_a_nic_on_its_numa_node_warns():
    devices = (
        PciDevice("gpu", "0000:18:00.0", 0, ("pci0000:15",)),
        PciDevice("gpu", "0000:9a:00.0", 1, ("pci0000:97",)),
        PciDevice("nic", "0000:17:00.0", 0, ("pci0000:16",), "mlx5_0"),
    )
    (f,) = gpu_placement.gpu_placement({"node1": _node("node1", devices)}, "node1", NodeConfig()).findings
    assert (f.gpu, f.setting, f.found, f.severity) == (1, "GPU's nearest NIC", "none on NUMA node 1; NICs on 0", "warn")


def test_a_failed_pcie_reading_is_not_judged_by_placement_or_acs():
    broken = _node("node1", errors=("PCIe ACS: PermissionError: [Errno 13] Permission denied: '/sys/bus/pci'",))
    (f,) = gpu_placement.gpu_placement({"node1": broken}, "node1", NodeConfig()).findings
    assert f.severity == "not_judged" and "PermissionError" in f.text
    (f,) = node_gpu_config.acs(broken).findings
    assert f.severity == "not_judged" and "PermissionError" in f.text


def test_each_nodes_reading_is_placed_once_however_many_nodes_are_judged(monkeypatch):
    # Every node's check compares it with every node: N nodes place N readings, not N².
    nodes = _cluster(node7=_layout(numa=(0, 0, 0, 1, 1, 1, 1, 1)))
    calls = []
    real = gpu_placement.placements
    monkeypatch.setattr(gpu_placement, "placements", lambda s: calls.append(s.node) or real(s))
    for node in nodes:
        gpu_placement.gpu_placement(nodes, node, NodeConfig())
    assert sorted(calls) == sorted(nodes)

"""The node-side readings of the node configuration check: recorded /proc files, PCIe
configuration space (recorded and built), and a sysfs tree of GPUs and NICs behind bridges."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pytest_gpucluster.workloads import node_settings, pci_acs
from pytest_gpucluster.workloads.context import local_context
from pytest_gpucluster.workloads.node_settings import Limit

DATA = Path(__file__).parents[1] / "data" / "node_config"


def test_limits_are_read_from_proc_self_limits():
    found = node_settings.parse_limits((DATA / "proc_self_limits_debian12_root.txt").read_text())
    assert found == {"memlock": Limit(8388608, 8388608), "nofile": Limit(20000, 20000)}


def test_unlimited_reads_as_none():
    text = "Max locked memory         unlimited            unlimited            bytes     \n"
    assert node_settings.parse_limits(text) == {"memlock": Limit(None, None)}


def test_swap_total_in_bytes():
    assert node_settings.parse_swap_total((DATA / "proc_meminfo_vm_noswap.txt").read_text()) == 0
    with_swap = (DATA / "proc_meminfo_8GiB_swap_representative_sample.txt").read_text()
    assert node_settings.parse_swap_total(with_swap) == 8388604 * 1024
    assert node_settings.parse_swap_total("MemTotal: 1 kB\n") is None


def test_a_vm_is_told_by_its_cpu_flag(tmp_path):
    assert node_settings.virtual_machine("flags\t\t: fpu vme hypervisor lahf_lm\n", tmp_path).startswith("the CPU")
    assert node_settings.virtual_machine("flags\t\t: fpu vme lahf_lm\n", tmp_path) == ""


def test_governors_and_interfaces_from_sysfs(tmp_path):
    for cpu, governor in enumerate(("performance", "powersave", "performance")):
        path = tmp_path / f"devices/system/cpu/cpu{cpu}/cpufreq/scaling_governor"
        path.parent.mkdir(parents=True)
        path.write_text(governor + "\n")
    for name, mtu, kind in (("lo", 65536, 772), ("ib0", 4092, 32), ("eth0", 9000, 1)):
        (tmp_path / "class/net" / name).mkdir(parents=True)
        (tmp_path / "class/net" / name / "mtu").write_text(f"{mtu}\n")
        (tmp_path / "class/net" / name / "type").write_text(f"{kind}\n")
    assert node_settings.read_governors(tmp_path) == {"performance": 2, "powersave": 1}
    assert node_settings.read_interfaces(tmp_path) == (
        node_settings.Interface("eth0", 9000, False),
        node_settings.Interface("ib0", 4092, True),
    )


def _sysfs(root: Path, path: str, text: str) -> None:
    (root / path).parent.mkdir(parents=True, exist_ok=True)
    (root / path).write_text(text + "\n")


def test_rdma_ports_name_their_network_interfaces_and_link_layer(tmp_path):
    # A RoCE port naming its interface in its GID table (an unused entry reads as an error, here a
    # directory), a RoCE bond named by its GID table though its PCI function lists a member, and
    # an InfiniBand HCA whose IPoIB interface only its PCI function lists.
    _sysfs(tmp_path, "class/infiniband/mlx5_0/ports/1/link_layer", "Ethernet")
    _sysfs(tmp_path, "class/infiniband/mlx5_0/ports/1/gid_attrs/ndevs/0", "ens1f0np0")
    _sysfs(tmp_path, "class/infiniband/mlx5_0/ports/1/gid_attrs/ndevs/1", "ens1f0np0")
    (tmp_path / "class/infiniband/mlx5_0/ports/1/gid_attrs/ndevs/2").mkdir()
    _sysfs(tmp_path, "class/infiniband/mlx5_bond_0/ports/1/link_layer", "Ethernet")
    _sysfs(tmp_path, "class/infiniband/mlx5_bond_0/ports/1/gid_attrs/ndevs/0", "bond0")
    (tmp_path / "class/infiniband/mlx5_bond_0/device/net/ens2f0np0").mkdir(parents=True)
    _sysfs(tmp_path, "class/infiniband/mlx5_2/ports/1/link_layer", "InfiniBand")
    (tmp_path / "class/infiniband/mlx5_2/device/net/ib0").mkdir(parents=True)
    assert node_settings.rdma_netdevs(tmp_path) == {
        "ens1f0np0": ("mlx5_0 port 1", "Ethernet"),
        "bond0": ("mlx5_bond_0 port 1", "Ethernet"),
        "ib0": ("mlx5_2 port 1", "InfiniBand"),
    }
    for name, mtu, kind in (("ens1f0np0", 4200, 1), ("bond0", 9000, 1), ("ib0", 4092, 32), ("eth0", 1500, 1)):
        _sysfs(tmp_path, f"class/net/{name}/mtu", str(mtu))
        _sysfs(tmp_path, f"class/net/{name}/type", str(kind))
    found = {i.name: i for i in node_settings.read_interfaces(tmp_path)}
    assert found["ens1f0np0"] == node_settings.Interface("ens1f0np0", 4200, False, "mlx5_0 port 1", "Ethernet")
    assert [n for n, i in found.items() if i.roce] == ["bond0", "ens1f0np0"]
    assert found["ib0"].infiniband and not found["ib0"].roce and found["eth0"].rdma_port == ""


def test_this_machine_is_read_without_error():
    found = node_settings.read_node(local_context())
    assert found.errors == ()
    assert "memlock" in found.limits and "nofile" in found.limits


# --- PCIe ACS ---------------------------------------------------------------------------------


def _config(*caps: tuple[int, int, int]) -> bytes:
    """A 4 KiB configuration space with extended capabilities (offset, id, control) chained in order."""
    space = bytearray(4096)
    space[0:4] = (0x10DE | 0x2330 << 16).to_bytes(4, "little")
    for i, (offset, cap_id, control) in enumerate(caps):
        following = caps[i + 1][0] if i + 1 < len(caps) else 0
        space[offset : offset + 4] = (cap_id | 1 << 16 | following << 20).to_bytes(4, "little")
        space[offset + 6 : offset + 8] = control.to_bytes(2, "little")
    return bytes(space)


def test_acs_control_is_found_along_the_capability_chain():
    # AER first, then ACS with SrcValid ReqRedir CmpltRedir UpstreamFwd set, as a switch port ships.
    space = _config((0x100, 0x0001, 0), (0x148, pci_acs.ACS_CAP_ID, 0x1D))
    assert pci_acs.acs_control(space) == 0x1D
    assert pci_acs.describe(0x1D) == "SrcValid+ ReqRedir+ CmpltRedir+ UpstreamFwd+"
    assert pci_acs.acs_control(_config((0x100, 0x0001, 0))) is None


def test_a_recorded_host_bridge_of_a_vm_has_no_acs():
    assert pci_acs.acs_control((DATA / "pci_config_vm_host_bridge_8086.bin").read_bytes()) is None


def test_the_first_256_bytes_hold_no_extended_capability():
    with pytest.raises(ValueError, match="256 bytes"):
        pci_acs.acs_control(bytes(256))


def _device(root: Path, path: str, cls: str, vendor: str, config: bytes) -> None:
    where = root / "devices" / path
    where.mkdir(parents=True, exist_ok=True)
    (where / "class").write_text(cls + "\n")
    (where / "vendor").write_text(vendor + "\n")
    (where / "config").write_bytes(config)
    link = root / "bus/pci/devices" / Path(path).name
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(os.path.relpath(where, link.parent))


def test_bridges_above_gpus_and_nics_are_read(tmp_path):
    redirect = _config((0x100, pci_acs.ACS_CAP_ID, 0x1D))
    off = _config((0x100, pci_acs.ACS_CAP_ID, 0))
    _device(tmp_path, "pci0000:00/0000:00:01.0", "0x060400", "0x8086", off)
    _device(tmp_path, "pci0000:00/0000:00:01.0/0000:01:00.0", "0x060400", "0x1000", redirect)
    _device(tmp_path, "pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:00.0", "0x030200", "0x10de", off)
    _device(tmp_path, "pci0000:00/0000:00:01.0/0000:01:00.0/0000:03:00.0", "0x020700", "0x15b3", off)
    nic = tmp_path / "devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:03:00.0"
    (nic / "numa_node").write_text("1\n")
    (nic / "infiniband/mlx5_0").mkdir(parents=True)
    (nic / "net/ib0").mkdir(parents=True)
    _device(tmp_path, "pci0000:00/0000:00:1f.0", "0x060100", "0x8086", off)
    found = pci_acs.read(tmp_path)
    path = ("pci0000:00", "0000:00:01.0", "0000:01:00.0")
    assert found.devices == (
        pci_acs.PciDevice("gpu", "0000:02:00.0", -1, path),
        pci_acs.PciDevice("nic", "0000:03:00.0", 1, path, "mlx5_0"),
    )
    assert found.unread == ()
    assert [(b.bdf, b.control) for b in found.bridges] == [("0000:00:01.0", 0), ("0000:01:00.0", 0x1D)]
    assert found.bridges[1].above == ("gpu 0000:02:00.0", "nic 0000:03:00.0")


def test_a_bridge_read_without_root_is_kept_unread_beside_those_read(tmp_path):
    # What a task of another user than root reads of a configuration space: its first 64 bytes
    # (captured on the H200 test machine, as nobody and as root).
    as_user = (DATA / "pci_config_h200_vm_gpu_read_as_user.bin").read_bytes()
    assert len(as_user) == 64
    assert as_user == (DATA / "pci_config_h200_vm_gpu_read_as_root.bin").read_bytes()[:64]
    off = _config((0x100, pci_acs.ACS_CAP_ID, 0))
    _device(tmp_path, "pci0000:00/0000:00:01.0", "0x060400", "0x8086", off)
    _device(tmp_path, "pci0000:00/0000:00:01.0/0000:01:00.0", "0x060400", "0x1000", as_user)
    _device(tmp_path, "pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:00.0", "0x030200", "0x10de", as_user)
    found = pci_acs.read(tmp_path)
    assert found.bridges == (
        pci_acs.Bridge("0000:00:01.0", ("gpu 0000:02:00.0",), 0),
        pci_acs.Bridge("0000:01:00.0", ("gpu 0000:02:00.0",), None, pci_acs.NOT_ROOT),
    )
    assert found.unread == found.bridges[1:]


def test_a_conventional_pci_bridge_has_no_acs_and_a_failed_read_says_why(tmp_path):
    (tmp_path / "config").write_bytes(bytes(256))
    assert pci_acs.bridge("0000:00:01.0", (), tmp_path / "config") == pci_acs.Bridge("0000:00:01.0", (), None)
    gone = pci_acs.bridge("0000:00:02.0", (), tmp_path / "missing")
    assert gone.control is None and gone.unread.startswith("FileNotFoundError")

"""Judging the node configuration: each deviation a ``node_setting`` finding naming the setting,
the value found, the value expected and the remedy; nothing to measure is not applicable."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest

from pytest_gpucluster.checks import node_config, node_gpu_config
from pytest_gpucluster.config import load
from pytest_gpucluster.config.node_config import COMPUTE_MODES, NodeConfig
from pytest_gpucluster.errors import ConfigError
from pytest_gpucluster.results import codec
from pytest_gpucluster.verdict import Finding
from pytest_gpucluster.workloads import gpu_modes, pci_acs
from pytest_gpucluster.workloads.node_settings import Interface, Limit, NodeSettings, parse_swap_total

MiB, GiB = 2**20, 2**30


def _node(name: str, memlock: int | None = 8 * MiB, nofile: int = 20000, **more) -> NodeSettings:
    limits = {"memlock": Limit(memlock, memlock), "nofile": Limit(nofile, nofile)}
    return NodeSettings(name, limits=limits, swap_total_bytes=0, **more)


def test_memlock_below_the_majority_warns_naming_the_node_without_rdma():
    nodes = {"node1": _node("node1"), "node2": _node("node2", memlock=64 * 1024)}
    assert node_config.limits(nodes, "node1", NodeConfig(), ib_hcas=0) == node_config.Judged()
    (f,) = node_config.limits(nodes, "node2", NodeConfig(), ib_hcas=0).findings
    assert (f.scope, f.setting, f.severity, f.convicts) == ("node_setting", "RLIMIT_MEMLOCK", "warn", ())
    assert (f.nodes, f.culprits, f.found) == (("node2",), ("node2",), "64 KiB")
    assert f.expected == "8 MiB or more (the majority of the tested nodes)"
    assert "PropagateResourceLimitsExcept" in f.remedy and f.text.startswith("node2: RLIMIT_MEMLOCK")
    assert f.text.endswith(f". To change: {f.remedy}")


def test_memlock_with_rdma_needs_16_gib_or_unlimited():
    nodes = {"node1": _node("node1", memlock=None), "node2": _node("node2", memlock=8 * MiB)}
    assert node_config.limits(nodes, "node1", NodeConfig(), ib_hcas=8).findings == ()
    (f,) = node_config.limits(nodes, "node2", NodeConfig(), ib_hcas=8).findings
    assert (f.severity, f.convicts, f.found) == ("fail", ("node2",), "8 MiB")
    assert f.expected.startswith("16 GiB or more (RDMA")


def test_the_profiles_lines_fail():
    nodes = {"node1": _node("node1", memlock=32 * GiB, nofile=1024)}
    (f,) = node_config.limits(nodes, "node1", NodeConfig(nofile_min=65536), ib_hcas=8).findings
    assert (f.setting, f.severity, f.found) == ("RLIMIT_NOFILE", "fail", "1024")
    assert f.expected == "65536 or more (the profile's node_config.nofile_min)"
    assert "LimitNOFILE=" in f.remedy
    (f,) = node_config.limits(nodes, "node1", NodeConfig(memlock_min=64 * GiB, nofile_min=1), ib_hcas=0).findings
    assert (f.setting, f.expected) == ("RLIMIT_MEMLOCK", "64 GiB or more (the profile's node_config.memlock_min)")


def test_an_unlimited_majority_makes_any_limit_a_deviation():
    nodes = {n: _node(n, memlock=None) for n in ("node1", "node2")} | {"node3": _node("node3", memlock=64 * GiB)}
    (f,) = node_config.limits(nodes, "node3", NodeConfig(), ib_hcas=0).findings
    assert f.expected == "unlimited (the majority of the tested nodes)"


def test_swap_warns_and_may_be_allowed():
    recorded = (
        Path(__file__).parents[1] / "data/node_config/proc_meminfo_8GiB_swap_representative_sample.txt"
    ).read_text()
    swapping = dataclasses.replace(_node("node1"), swap_total_bytes=parse_swap_total(recorded))
    (f,) = node_config.swap(swapping, NodeConfig()).findings
    assert (f.setting, f.found, f.expected, f.severity) == ("swap", "8 GiB", "0", "warn")
    assert node_config.swap(swapping, NodeConfig(swap_allowed=True)) == node_config.Judged()
    no_swap_kernel = dataclasses.replace(swapping, swap_total_bytes=None)
    assert "no SwapTotal" in node_config.swap(no_swap_kernel, NodeConfig()).not_applicable


def test_governor_other_than_performance_warns_and_absent_is_not_applicable():
    node = dataclasses.replace(_node("node1"), governors={"performance": 2, "powersave": 2})
    (f,) = node_config.governor(node, NodeConfig()).findings
    assert (f.setting, f.found, f.expected, f.severity) == (
        "cpu governor",
        "powersave on 2 CPU(s)",
        "performance",
        "warn",
    )
    assert "no cpufreq" in node_config.governor(_node("node1"), NodeConfig()).not_applicable


def _with_if(name: str, mtu: int) -> NodeSettings:
    return dataclasses.replace(_node(name), interfaces=(Interface("ib0", mtu, True), Interface("eth0", 1500)))


def test_mtu_of_nccls_interface_alike_across_nodes():
    nodes = {"node1": _with_if("node1", 4092), "node2": _with_if("node2", 4092), "node3": _with_if("node3", 2044)}
    (f,) = node_config.mtu(nodes, NodeConfig(), {}).findings
    assert (f.setting, f.convicts, f.found, f.expected) == (
        "MTU of ib0",
        ("node3",),
        "2044",
        "4092 (the majority of the tested nodes)",
    )
    assert node_config.mtu(nodes, NodeConfig(), {"NCCL_SOCKET_IFNAME": "eth"}).findings == ()
    assert node_config.mtu(nodes, NodeConfig(), {"NCCL_SOCKET_IFNAME": "^ib,lo"}).findings == ()
    (g,) = node_config.mtu(nodes, NodeConfig(mtu=9000, nccl_interfaces=("=eth0",)), {}).findings[:1]
    assert (g.setting, g.expected) == ("MTU of eth0", "9000 (node_config.mtu)")


def test_mtu_without_a_majority_names_the_nodes_and_convicts_none():
    nodes = {"node1": _with_if("node1", 4092), "node2": _with_if("node2", 2044)}
    (f,) = node_config.mtu(nodes, NodeConfig(), {}).findings
    assert (f.scope, f.nodes, f.convicts) == ("nodes", ("node1", "node2"), ())


def _with_roce(name: str, mtu: int) -> NodeSettings:
    roce = (Interface("ens1f0np0", mtu, False, "mlx5_0 port 1", "Ethernet"), Interface("eth0", 1500))
    return dataclasses.replace(_node(name), interfaces=roce)


def test_mtu_of_a_roce_interface_alike_beside_nccls_sockets():
    nodes = {"node1": _with_roce("node1", 4200), "node2": _with_roce("node2", 4200), "node3": _with_roce("node3", 1500)}
    # Whatever NCCL's sockets use, the RoCE interface's MTU is judged: RDMA goes through it.
    for env in ({}, {"NCCL_SOCKET_IFNAME": "eth0"}):
        (f,) = node_config.mtu(nodes, NodeConfig(), env).findings
        assert (f.scope, f.setting, f.convicts, f.found) == ("node_setting", "MTU of ens1f0np0", ("node3",), "1500")
        assert f.expected == "4200 (the majority of the tested nodes)"
        assert "the RoCE interface of mlx5_0 port 1" in f.text and "RoCE takes its path MTU" in f.text
        assert f.remedy.startswith("ip link set dev ens1f0np0 mtu 4200") and "switch ports" in f.remedy
    # NCCL_IB_HCA leaves the device out: its interface is not NCCL's to use.
    assert "no interface to compare" in node_config.mtu(nodes, NodeConfig(), {"NCCL_IB_HCA": "mlx5_1"}).not_applicable
    assert len(node_config.mtu(nodes, NodeConfig(), {"NCCL_IB_HCA": "=mlx5_0:1"}).findings) == 1


def test_mtu_without_a_majority_says_what_to_expect_and_how_to_change_it():
    nodes = {"node1": _with_if("node1", 4092), "node2": _with_if("node2", 2044)}
    (f,) = node_config.mtu(nodes, NodeConfig(), {}).findings
    assert (f.setting, f.found) == ("MTU of ib0", "node1 4092, node2 2044")
    assert "node_config.mtu" in f.expected and "node_config.mtu" in f.remedy and "ip link set dev ib0 mtu" in f.remedy


def test_mtu_without_an_interface_to_compare_is_not_applicable():
    assert "no interface to compare" in node_config.mtu({"node1": _node("node1")}, NodeConfig(), {}).not_applicable


def _gpus(*modes: gpu_modes.GpuMode, error: str = "") -> NodeSettings:
    return dataclasses.replace(_node("node1"), gpus=gpu_modes.GpuModes(modes, error))


def test_gpu_modes_not_applicable_without_real_gpus():
    judged = node_gpu_config.gpu_modes_of({"node1": _gpus()}, "node1", NodeConfig(), gpus_are_real=False)
    assert "gpus_are_real = false" in judged.not_applicable


def test_persistence_off_warns_and_ecc_unlike_the_others_fails():
    node = _gpus(
        gpu_modes.GpuMode(0, persistence=True, ecc_current=True, ecc_pending=True),
        gpu_modes.GpuMode(1, persistence=False, ecc_current=False, ecc_pending=False),
        gpu_modes.GpuMode(2, persistence=True, ecc_current=True, ecc_pending=False),
    )
    found = node_gpu_config.gpu_modes_of({"node1": node}, "node1", NodeConfig(), gpus_are_real=True).findings
    assert [(f.setting, f.gpu, f.severity, f.found, f.expected) for f in found] == [
        ("persistence mode", 1, "warn", "off", "on"),
        ("ECC mode", 1, "fail", "off", "on"),
        ("ECC mode", 2, "warn", "on (off pending)", "on"),
    ]
    assert found[1].place == "node1:gpu1 ECC mode"


def test_gpudirect_only_where_infiniband_exists():
    gpu = (gpu_modes.GpuMode(0),)
    without_ib = _gpus(*gpu)
    assert "no InfiniBand" in node_gpu_config.gpudirect(without_ib, gpus_are_real=True, ib_hcas=0).not_applicable
    bare = dataclasses.replace(without_ib, rdma_devices=("mlx5_0",), kernel="5.15.0-105-generic")
    (f,) = node_gpu_config.gpudirect(bare, gpus_are_real=True, ib_hcas=0).findings
    assert (f.setting, f.severity) == ("GPUDirect RDMA", "fail") and "modprobe nvidia_peermem" in f.remedy
    loaded = dataclasses.replace(bare, peermem_module="nvidia_peermem")
    dmabuf = dataclasses.replace(bare, nvidia_open_module=True)
    old_kernel = dataclasses.replace(dmabuf, kernel="5.4.0-150-generic")
    assert node_gpu_config.gpudirect(loaded, gpus_are_real=True, ib_hcas=8) == node_config.Judged()
    assert node_gpu_config.gpudirect(dmabuf, gpus_are_real=True, ib_hcas=8) == node_config.Judged()
    assert "older than 5.12" in node_gpu_config.gpudirect(old_kernel, gpus_are_real=True, ib_hcas=8).findings[0].found


def test_nvswitch_fabric_judged_only_where_one_exists():
    none = _gpus(gpu_modes.GpuMode(0, fabric_state=gpu_modes.FABRIC_NOT_SUPPORTED))
    assert "no NVSwitch" in node_gpu_config.nvswitch_fabric(none, gpus_are_real=True).not_applicable
    waiting = _gpus(gpu_modes.GpuMode(0, fabric_state=3, fabric_status=0), gpu_modes.GpuMode(1, fabric_state=2))
    (f,) = node_gpu_config.nvswitch_fabric(waiting, gpus_are_real=True).findings
    assert (f.gpu, f.found, f.expected) == (1, "registration in progress", "completed")
    assert "nvidia-fabricmanager" in f.remedy


GPU_UNDER_SWITCH = pci_acs.PciDevice("gpu", "0000:02:00.0", 0, ("pci0000:00", "0000:00:01.0", "0000:01:00.0"))


def _acs(*bridges: pci_acs.Bridge, **more) -> NodeSettings:
    return dataclasses.replace(_node("node1"), acs=pci_acs.AcsReading((GPU_UNDER_SWITCH,), bridges), **more)


def test_acs_redirect_fails_on_bare_metal_and_a_vm_is_not_applicable():
    node = _acs(pci_acs.Bridge("0000:00:01.0", ("gpu 0000:02:00.0",), 0x1D), pci_acs.Bridge("0000:00:02.0", (), 0x11))
    (f,) = node_gpu_config.acs(node).findings
    assert (f.setting, f.found) == ("PCIe ACS 0000:00:01.0", "SrcValid+ ReqRedir+ CmpltRedir+ UpstreamFwd+")
    assert "setpci -s 0000:00:01.0 ECAP_ACS+0x6.w=0000" in f.remedy
    vm = dataclasses.replace(node, virtual_machine="the CPU reports the hypervisor flag")
    assert "a virtual machine" in node_gpu_config.acs(vm).not_applicable
    assert "no PCIe bridge" in node_gpu_config.acs(_acs()).not_applicable


def test_acs_unreadable_without_root_on_bare_metal_is_not_judged_saying_how_to_judge_it():
    found = node_gpu_config.acs(_acs(pci_acs.Bridge("0000:00:01.0", ("gpu 0000:02:00.0",), None, pci_acs.NOT_ROOT)))
    assert found.not_applicable == ""
    (f,) = found.findings
    assert (f.severity, f.nodes, f.convicts) == ("not_judged", ("node1",), ())
    assert "0000:00:01.0" in f.text and "CAP_SYS_ADMIN" in f.text
    assert "as root" in f.text and "Slurm prolog" in f.text and "lspci -vvv -s" in f.text


def test_acs_judges_the_bridges_read_and_names_those_not_read():
    node = _acs(
        pci_acs.Bridge("0000:00:01.0", ("gpu 0000:02:00.0",), 0x1D),
        pci_acs.Bridge("0000:01:00.0", ("gpu 0000:02:00.0",), None, pci_acs.NOT_ROOT),
        pci_acs.Bridge("0000:00:02.0", ("nic 0000:05:00.0",), 0),
    )
    failed, unjudged = node_gpu_config.acs(node).findings
    assert (failed.severity, failed.setting) == ("fail", "PCIe ACS 0000:00:01.0")
    assert unjudged.severity == "not_judged"
    assert "not judged on 1 of 3 bridges" in unjudged.text and "(0000:01:00.0;" in unjudged.text
    clean = _acs(
        pci_acs.Bridge("0000:00:01.0", ("gpu 0000:02:00.0",), 0),
        pci_acs.Bridge("0000:01:00.0", ("gpu 0000:02:00.0",), None, "PermissionError: Permission denied"),
    )
    (f,) = node_gpu_config.acs(clean).findings
    assert f.severity == "not_judged" and "PermissionError" in f.text and "CAP_SYS_ADMIN" not in f.text


def test_a_setting_finding_keeps_its_fields_through_the_results_file():
    f = Finding.of_setting(
        "node2", "RLIMIT_MEMLOCK", "t", found="64 KiB", expected="8 MiB", remedy="r", severity="warn"
    )
    assert codec.decode_finding(codec.encode_finding(f)) == f
    assert f.place == "node2 RLIMIT_MEMLOCK"


def test_the_profile_table_rejects_an_unknown_key(tmp_path: Path):
    path = tmp_path / "t.toml"
    path.write_text('[profiles.x]\ngpus_per_node = 0\n[profiles.x.node_config]\nmemlock_min = "16GiB"\nmemlok = 1\n')
    with pytest.raises(
        ConfigError, match=r"profiles\.x\.node_config\.memlok: unknown key\. Perhaps you meant 'memlock_min'"
    ):
        load(path)
    path.write_text('[profiles.x]\ngpus_per_node = 0\n[profiles.x.node_config]\nmemlock_min = "16GiB"\n')
    assert load(path).profile("x").node_config == NodeConfig(memlock_min=16 * GiB)


def test_limits_that_could_not_be_read_leave_the_check_not_judged():
    unread = NodeSettings("node1", errors=("limits: PermissionError: /proc/self/limits",))
    (f,) = node_config.limits({"node1": unread}, "node1", NodeConfig(), ib_hcas=0).findings
    assert (f.severity, f.convicts) == ("not_judged", ()) and "PermissionError" in f.text


DATA = Path(__file__).resolve().parents[1] / "data" / "node_config"


def _h200(**changed) -> gpu_modes.GpuMode:
    """The one H200 of the test machine as NVML read it (captured), with ``changed`` set."""
    (read,) = json.loads((DATA / "gpu_modes_h200_vm.json").read_text())
    return dataclasses.replace(gpu_modes.GpuMode(**read), **changed)


def _caps(*gpus: gpu_modes.GpuMode, cfg: NodeConfig | None = None) -> node_config.Judged:
    return node_gpu_config.gpu_caps_of(_gpus(*gpus), cfg or NodeConfig(), gpus_are_real=True)


def test_the_captured_h200_reading_agrees_with_nvidia_smi_and_passes():
    smi = (DATA / "nvidia-smi-580-q-power-clock-compute-h200-vm.txt").read_text()

    def field(section: str, name: str) -> str:
        after = smi[smi.index(f"    {section}\n") :]
        return re.search(rf"^\s+{name}\s+: (.+)$", after, re.M).group(1)

    g = _h200()
    assert field("GPU Power Readings", "Current Power Limit") == f"{g.power_enforced_w:.2f} W"
    assert field("GPU Power Readings", "Requested Power Limit") == f"{g.power_limit_w:.2f} W"
    assert field("GPU Power Readings", "Default Power Limit") == f"{g.power_default_w:.2f} W"
    assert field("Applications Clocks", "Graphics") == f"{g.app_clock_mhz} MHz"
    assert field("Default Applications Clocks", "Memory") == f"{g.app_memory_clock_default_mhz} MHz"
    assert re.search(r"Compute Mode\s+: Default", smi) and COMPUTE_MODES[g.compute_mode] == "default"
    assert _caps(g, _h200(index=1)) == node_config.Judged()


def test_a_power_limit_below_the_default_fails_naming_the_gpu_and_who_set_it():
    by_driver = _h200(index=3, power_limit_w=500.0, power_enforced_w=500.0)
    out_of_band = _h200(index=5, power_enforced_w=450.0)
    found = _caps(_h200(index=0), by_driver, out_of_band).findings
    assert [(f.setting, f.gpu, f.severity, f.found, f.expected) for f in found] == [
        ("power limit", 3, "fail", "500 W", "700 W"),
        ("power limit", 5, "fail", "450 W", "700 W"),
    ]
    assert found[0].text.startswith("node1:gpu3: power limit 500 W, expected 700 W (the board's default)")
    assert "nvidia-smi -i 3 -pl 700" in found[0].remedy
    assert "the driver's own limit is 700 W" in found[1].text and "BMC" in found[1].remedy
    assert found[0].convicts == ("node1",) and found[0].place == "node1:gpu3 power limit"


def test_a_site_that_caps_its_gpus_on_purpose_says_so_in_the_profile():
    capped = _h200(power_limit_w=600.0, power_enforced_w=600.0)
    assert _caps(capped, cfg=NodeConfig(power_limit_w=600)) == node_config.Judged()
    assert _caps(_h200(), cfg=NodeConfig(power_limit_w=600)) == node_config.Judged()  # above the cap: not slower
    (f,) = _caps(_h200(power_limit_w=550.0, power_enforced_w=550.0), cfg=NodeConfig(power_limit_w=600)).findings
    assert (f.found, f.expected) == ("550 W", "600 W") and "(node_config.power_limit_w)" in f.text
    # Rounding of a board's milliwatts is no finding.
    assert _caps(_h200(power_enforced_w=699.5)) == node_config.Judged()


def test_an_applications_clock_below_its_default_fails_with_the_reset():
    found = _caps(_h200(index=2, app_clock_mhz=1410, app_memory_clock_mhz=2619)).findings
    assert [(f.setting, f.found, f.expected, f.severity) for f in found] == [
        ("applications clock (graphics)", "1410 MHz", "1980 MHz", "fail"),
        ("applications clock (memory)", "2619 MHz", "3201 MHz", "fail"),
    ]
    assert found[0].remedy == "nvidia-smi -i 2 -rac (the applications clocks back to their defaults)"
    assert _caps(_h200(app_clock_mhz=2010)) == node_config.Judged()  # above the default: not slower


def test_a_compute_mode_other_than_the_profiles_warns_and_prohibited_fails():
    exclusive, prohibited = _h200(index=1, compute_mode=3), _h200(index=2, compute_mode=2)
    found = _caps(_h200(), exclusive, prohibited).findings
    assert [(f.gpu, f.found, f.expected, f.severity) for f in found] == [
        (1, "exclusive_process", "default", "warn"),
        (2, "prohibited", "default", "fail"),
    ]
    assert "busy or unavailable" in found[0].text and found[0].remedy.startswith("nvidia-smi -i 1 -c DEFAULT")
    site = NodeConfig(compute_mode="exclusive_process")
    assert _caps(exclusive, cfg=site) == node_config.Judged()
    (f,) = _caps(_h200(), cfg=site).findings
    assert (f.found, f.expected, f.severity) == ("default", "exclusive_process", "warn")
    assert "-c EXCLUSIVE_PROCESS" in f.remedy


def test_gpu_caps_not_applicable_without_a_reading():
    assert (
        "gpus_are_real = false"
        in node_gpu_config.gpu_caps_of(_gpus(), NodeConfig(), gpus_are_real=False).not_applicable
    )
    assert "NVML lists no GPU" in _caps().not_applicable
    assert "no power limit, applications clock or compute mode" in _caps(gpu_modes.GpuMode(0)).not_applicable
    (f,) = _caps(_h200(), gpu_modes.GpuMode(1)).findings
    assert (f.severity, f.gpu) == ("not_judged", 1) and f.text.startswith("node1:gpu1: power limit, applications")
    unread = node_gpu_config.gpu_caps_of(_gpus(error="NVML: Unknown Error"), NodeConfig(), gpus_are_real=True)
    (f,) = unread.findings
    assert "GPU settings unreadable: NVML: Unknown Error" in f.text and f.convicts == ("node1",)


def test_the_profile_rejects_a_compute_mode_or_power_limit_no_gpu_takes():
    with pytest.raises(
        ValueError, match="compute_mode: one of default, exclusive_thread, prohibited, exclusive_process"
    ):
        NodeConfig(compute_mode="exclusive")
    with pytest.raises(ValueError, match="power_limit_w: a GPU power limit in watts from 50 to 5000, got 7"):
        NodeConfig(power_limit_w=7)


def test_the_profile_table_takes_a_sites_power_cap_and_compute_mode(tmp_path: Path):
    path = tmp_path / "t.toml"
    table = '[profiles.x]\ngpus_per_node = 0\n[profiles.x.node_config]\npower_limit_w = 600\ncompute_mode = "{}"\n'
    path.write_text(table.format("exclusive_process"))
    assert load(path).profile("x").node_config == NodeConfig(power_limit_w=600, compute_mode="exclusive_process")
    path.write_text(table.format("exclusive"))
    with pytest.raises(ConfigError, match=r"t\.toml: profiles\.x\.node_config: compute_mode: one of default"):
        load(path)

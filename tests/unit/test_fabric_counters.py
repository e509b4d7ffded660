"""Fabric error counters: reading recorded sysfs trees (tests/data/fabric) and judging two reads
(the rules themselves: test_fabric_rules.py)."""

from __future__ import annotations

import pickle
import shutil
from dataclasses import asdict, replace
from pathlib import Path

from pytest_gpucluster.checks import fabric
from pytest_gpucluster.workloads import fabric_counters
from pytest_gpucluster.workloads.context import local_context
from pytest_gpucluster.workloads.fabric_counters import FabricSnapshot, GpuNvLinks, NvLinkCounters
from pytest_gpucluster.workloads.nvml_util import NODE_GPUS_ENV

DATA = Path(__file__).parent.parent / "data" / "fabric"


def _snap(tree: str | Path, t: float) -> FabricSnapshot:
    """The tree read as node1 at ``t``, NVML answering with no GPU (NVLink is tested below)."""
    snap = fabric_counters.snapshot(local_context(), root=str(tree), nvml=False)
    return replace(snap, node="node1", time_s=t, nvml_status="ok")


def _copy(tmp_path: Path, name: str) -> Path:
    return Path(shutil.copytree(DATA / name, tmp_path / name))


def test_reads_every_port_and_only_error_counters():
    ports = fabric_counters.read_ib_counters(str(DATA / "before"))
    assert [(p.hca, p.port) for p in ports] == [(f"mlx5_{i}", "1") for i in range(4)]
    names = set(ports[0].counters)
    assert set(fabric_counters.IB_ERROR_COUNTERS) <= names
    assert "out_of_sequence" in names and "req_transport_retries_exceeded" in names  # hw_counters/
    assert not names & {"port_xmit_data", "port_rcv_packets", "lifespan", "rx_write_requests"}  # traffic, settings
    assert ports[1].counters["link_downed"] == 1
    assert ports[3].counters["symbol_error"] == 3
    assert ports[0].unreadable == ()


def test_hw_counters_only_where_present(tmp_path):
    tree = _copy(tmp_path, "before")
    shutil.rmtree(tree / "mlx5_0" / "ports" / "1" / "hw_counters")
    ports = fabric_counters.read_ib_counters(str(tree))
    assert set(ports[0].counters) == set(fabric_counters.IB_ERROR_COUNTERS)
    assert "out_of_sequence" in ports[1].counters


def test_no_tree_and_no_nvml_do_not_raise(tmp_path):
    snap = fabric_counters.snapshot(local_context(), root=str(tmp_path / "absent"), nvml=False)
    assert snap.ib_ports == () and snap.gpus == () and snap.nvml_status.startswith("unsupported")
    assert snap.node == local_context().hostname and snap.time_s > 0


def test_snapshot_pickles():
    snap = _snap(DATA / "before", 100.0)
    assert pickle.loads(pickle.dumps(snap)) == snap


def test_clean_pair_finds_nothing():
    found = fabric.compare(_snap(DATA / "before", 100.0), _snap(DATA / "after_clean", 900.0))
    assert found == []


def test_a_slow_rise_of_a_rate_judged_counter_warns_with_its_rate():
    # 37 symbol errors over 13 min 35 s is 0.045/s: under the 10/s fail line, over the warn line 0.
    found = fabric.compare(_snap(DATA / "before", 100.0), _snap(DATA / "after_symbol_errors", 915.0))
    assert [(f.status, f.sentence) for f in found] == [
        (
            "warn",
            "node1: InfiniBand symbol_error 0.0454/s on mlx5_2 port 1 over 13 min 35 s "
            "(warn > 0, fail ≥ 10/s per port)",
        )
    ]
    assert found[0].kind == "increase" and found[0].subject == "symbol_error" and not found[0].fails
    assert found[0].detail == ({"where": "mlx5_2 port 1", "counter": "symbol_error", "before": 0, "after": 37},)
    (warned,) = fabric.judged(found)
    assert (warned.severity, warned.text, warned.scope, warned.port) == ("warn", found[0].sentence, "port", "mlx5_2/1")
    assert (warned.nodes, warned.culprits) == (("node1",), ("node1",))


def test_the_same_rise_in_three_seconds_fails():
    found = fabric.compare(_snap(DATA / "before", 100.0), _snap(DATA / "after_symbol_errors", 103.0))
    assert [(f.text, f.severity, f.port) for f in fabric.judged(found)] == [
        (
            "node1: InfiniBand symbol_error 12.3/s on mlx5_2 port 1 over 3 s (warn > 0, fail ≥ 10/s per port)",
            "fail",
            "mlx5_2/1",
        )
    ]


def test_a_fatal_counter_fails_on_one_and_ports_fold(tmp_path):
    tree = _copy(tmp_path, "after_clean")
    for hca in ("mlx5_0", "mlx5_1", "mlx5_3"):
        path = tree / hca / "ports" / "1" / "counters" / "link_downed"
        path.write_text(f"{int(path.read_text()) + 1}\n")
    found = fabric.compare(_snap(DATA / "before", 0.0), _snap(tree, 45.0))
    (failed,) = fabric.judged(found)
    assert failed.text == "node1: InfiniBand link_downed +3 on mlx5_0–1, 3 port 1 over 45 s (fail > 0)"
    assert (failed.scope, failed.port, failed.culprits) == ("node", "", ("node1",))  # three ports: the node's
    assert [d["where"] for d in found[0].detail] == ["mlx5_0 port 1", "mlx5_1 port 1", "mlx5_3 port 1"]


def test_reset_is_not_an_increase(tmp_path):
    tree = _copy(tmp_path, "after_clean")
    (tree / "mlx5_1" / "ports" / "1" / "counters" / "link_downed").write_text("0\n")
    found = fabric.compare(_snap(DATA / "before", 100.0), _snap(tree, 145.0))
    assert [(f.kind, f.node, f.subject) for f in found] == [("reset", "node1", "link_downed")]
    assert found[0].sentence == (
        "node1: link_downed went down 1 → 0 on mlx5_1 port 1 over 45 s: the counter was reset or wrapped, "
        "so its increase during the run is unknown"
    )
    assert found[0].fails
    assert (found[0].finding().scope, found[0].finding().port) == ("port", "mlx5_1/1")


def test_missing_port_and_counter(tmp_path):
    tree = _copy(tmp_path, "after_clean")
    shutil.rmtree(tree / "mlx5_3")
    (tree / "mlx5_0" / "ports" / "1" / "counters" / "port_rcv_errors").unlink()
    found = fabric.compare(_snap(DATA / "before", 100.0), _snap(tree, 160.0))
    assert sorted(f.sentence for f in found) == [
        "node1: mlx5_3 port 1 read before the run, missing after (HCA gone or its driver reset)",
        "node1: port_rcv_errors on mlx5_0 port 1 read before the run, missing after",
    ]
    assert all(f.fails for f in found)


def test_saturated_counter_warns_and_increase_to_the_top_says_so(tmp_path):
    before_tree = _copy(tmp_path, "before")
    (before_tree / "mlx5_0" / "ports" / "1" / "counters" / "symbol_error").write_text("65535\n")
    (before_tree / "mlx5_1" / "ports" / "1" / "counters" / "link_downed").write_text("250\n")
    after_tree = _copy(tmp_path, "after_clean")
    (after_tree / "mlx5_0" / "ports" / "1" / "counters" / "symbol_error").write_text("65535\n")
    (after_tree / "mlx5_1" / "ports" / "1" / "counters" / "link_downed").write_text("255\n")
    found = fabric.compare(_snap(before_tree, 0.0), _snap(after_tree, 30.0))
    assert [(f.kind, f.status) for f in found] == [("increase", "fail"), ("saturated", "warn")]
    assert found[0].sentence.endswith(
        "; link_downed on mlx5_1 port 1 is now at its 8-bit maximum, so the true increase may be larger"
    )
    assert found[1].sentence.startswith("node1: symbol_error on mlx5_0 port 1 was at its 16-bit maximum 65535")


def test_unreadable_counter_is_named(tmp_path):
    tree = _copy(tmp_path, "after_clean")
    (tree / "mlx5_2" / "ports" / "1" / "counters" / "symbol_error").write_text("N/A\n")
    found = fabric.compare(_snap(DATA / "before", 0.0), _snap(tree, 30.0))
    assert [(f.kind, f.sentence) for f in found] == [
        ("unreadable", "node1: symbol_error on mlx5_2 port 1 is not a number in sysfs; not judged")
    ]


def test_node_missing_after():
    before = [_snap(DATA / "before", 0.0), replace(_snap(DATA / "before", 0.0), node="node2")]
    found = fabric.compare_nodes(before, [_snap(DATA / "after_symbol_errors", 60.0)])
    assert [(f.node, f.status) for f in found] == [("node1", "warn"), ("node2", "fail")]
    assert found[1].sentence.startswith("node2: fabric counters read before the run, none after")
    assert [(f.scope, f.nodes, f.severity) for f in fabric.judged(found)] == [
        ("port", ("node1",), "warn"),
        ("node", ("node2",), "fail"),
    ]


# ----------------------------------------------------------------------------------------- NVLink


def _links(index: int, values: dict[int, dict[str, int]], unsupported: tuple[str, ...] = ()) -> GpuNvLinks:
    return GpuNvLinks(index, tuple(NvLinkCounters(link, c, unsupported) for link, c in values.items()))


def _nv(gpus: tuple[GpuNvLinks, ...], t: float, status: str = "ok") -> FabricSnapshot:
    return FabricSnapshot("node1", t, "/sys/class/infiniband", (), gpus, status)


ZERO = {"nvlink_replay": 0, "nvlink_recovery": 0, "nvlink_crc_flit": 0}
HOPPER_UNSUPPORTED = ("nvlink_crc_data", "nvlink_ecc_data")


def test_nvlink_increase_missing_gpu_and_unsupported():
    before = _nv((_links(0, {0: ZERO, 1: ZERO}, HOPPER_UNSUPPORTED), _links(1, {0: ZERO}, HOPPER_UNSUPPORTED)), 0.0)
    after = _nv((_links(0, {0: ZERO, 1: {**ZERO, "nvlink_replay": 4}}, HOPPER_UNSUPPORTED),), 75.0)
    found = fabric.compare(before, after)
    assert [(f.kind, f.status, f.sentence) for f in found] == [
        ("increase", "fail", "node1: NVLink replay +4 on gpu0 link 1 over 1 min 15 s (fail > 0)"),
        ("unsupported", "warn", "node1: NVML does not report nvlink_crc_data on gpu0; not checked"),
        ("unsupported", "warn", "node1: NVML does not report nvlink_ecc_data on gpu0; not checked"),
        ("missing", "fail", "node1: link counters of gpu1 read before the run, GPU missing after"),
    ]
    assert [(f.scope, f.gpu, f.port, f.severity) for f in fabric.judged(found)] == [
        ("port", 0, "link 1", "fail"),
        ("gpu", 0, "", "warn"),
        ("gpu", 0, "", "warn"),
        ("gpu", 1, "", "fail"),
    ]


def test_nvml_unsupported_warns_without_real_gpus_and_is_incomplete_with_them():
    status = "unsupported: NVML unusable (NVML Shared Library Not Found)"
    found = fabric.compare(_nv((), 0.0, status), _nv((), 10.0, status))
    assert [(f.kind, f.status) for f in found] == [("unread", "warn")]
    assert "NVML Shared Library Not Found" in found[0].sentence
    found = fabric.compare(_nv((), 0.0, status), _nv((), 10.0, status), nvlink_required=True)
    assert [(f.kind, f.status) for f in found] == [("unread", "incomplete")]
    (unjudged,) = fabric.judged(found)
    assert (unjudged.scope, unjudged.nodes, unjudged.severity, unjudged.convicts) == (
        "node",
        ("node1",),
        "not_judged",
        (),
    )
    assert found[0].sentence == (
        "node1: NVLink error counters not read (NVML unusable (NVML Shared Library Not Found)) although the "
        "profile's GPUs are real; NVLink not judged"
    )
    assert [f.status for f in fabric.compare(_nv((), 0.0), _nv((), 10.0), nvlink_required=True)] == ["incomplete"]


def test_snapshot_round_trips_through_a_dict():
    snap = _nv((_links(0, {0: ZERO}, HOPPER_UNSUPPORTED),), 5.0)
    assert fabric_counters.snapshot_from_dict(asdict(snap)) == snap


class _NotSupported(Exception):
    pass


class _Nvml:
    """The few NVML calls the reader makes, answering like a two-GPU Hopper node: 2 links per GPU,
    CRC data and ECC data counters not supported."""

    NVMLError = Exception
    NVMLError_NotSupported = _NotSupported
    NVMLError_InvalidArgument = IndexError
    NVML_NVLINK_MAX_LINKS = 18
    NVML_NVLINK_ERROR_DL_REPLAY = 0
    NVML_NVLINK_ERROR_DL_RECOVERY = 1
    NVML_NVLINK_ERROR_DL_CRC_FLIT = 2
    NVML_NVLINK_ERROR_DL_CRC_DATA = 3
    NVML_NVLINK_ERROR_DL_ECC_DATA = 4

    def nvmlDeviceGetCount(self) -> int:
        return 2

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        return index

    def nvmlDeviceGetNvLinkState(self, handle: int, link: int) -> int:
        if link >= 2:
            raise IndexError(link)
        return 1

    def nvmlDeviceGetNvLinkErrorCounter(self, handle: int, link: int, kind: int) -> int:
        if kind >= 3:
            raise _NotSupported()
        return 10 * handle + link if kind == 0 else 0

    def nvmlDeviceGetPcieReplayCounter(self, handle: int) -> int:
        if handle == 1:
            raise _NotSupported()
        return 7


def test_reads_nvlink_counters_through_nvml():
    gpus, status = fabric_counters.read_nvlink_counters(_Nvml())
    assert status == "ok"
    assert [(g.index, len(g.links)) for g in gpus] == [(0, 2), (1, 2)]
    assert gpus[1].links[1] == NvLinkCounters(
        1, {"nvlink_replay": 11, "nvlink_recovery": 0, "nvlink_crc_flit": 0}, HOPPER_UNSUPPORTED
    )


def test_reads_each_gpus_pcie_replay_counter_or_says_it_is_unsupported():
    gpus, _ = fabric_counters.read_nvlink_counters(_Nvml())
    assert (gpus[0].pcie, gpus[0].pcie_unsupported) == ({"pcie_replay": 7}, ())
    assert (gpus[1].pcie, gpus[1].pcie_unsupported) == ({}, ("pcie_replay",))
    snap = _nv(gpus, 5.0)
    assert fabric_counters.snapshot_from_dict(asdict(snap)) == snap


def _pcie(index: int, replays: int, links: int = 0) -> GpuNvLinks:
    return GpuNvLinks(index, tuple(NvLinkCounters(i, dict(ZERO)) for i in range(links)), (), {"pcie_replay": replays})


def test_pcie_replays_past_eight_a_minute_fail_naming_the_gpu_and_fewer_warn():
    # DCGM's line: 8 replays a minute. gpu1 sent 30 again in 2 min (15/min), gpu2 3 (1.5/min).
    before = _nv((_pcie(0, 5), _pcie(1, 100, links=2), _pcie(2, 0)), 0.0)
    after = _nv((_pcie(0, 5), _pcie(1, 130, links=2), _pcie(2, 3)), 120.0)
    found = fabric.compare(before, after)
    assert [(f.status, f.sentence.split(": the GPU")[0]) for f in found] == [
        ("fail", "node1: PCIe replay 15/min on gpu1 over 2 min 0 s (warn > 0, fail ≥ 8/min per GPU)"),
        ("warn", "node1: PCIe replay 1.5/min on gpu2 over 2 min 0 s (warn > 0, fail ≥ 8/min per GPU)"),
    ]
    assert "marginal riser, slot or retimer" in found[0].sentence
    (failed, warned) = fabric.judged(found)
    assert (failed.gpu, failed.port, warned.gpu) == (1, "", 2)  # the GPU, not one of its NVLinks
    assert found[0].detail == ({"where": "gpu1", "counter": "pcie_replay", "before": 100, "after": 130},)


def test_a_pcie_replay_counter_that_went_down_or_is_unsupported_is_said():
    before = _nv((_pcie(0, 50),), 0.0)
    reset = fabric.compare(before, _nv((_pcie(0, 2),), 60.0))
    assert [(f.kind, f.status) for f in reset] == [("reset", "fail")]
    assert "pcie_replay went down 50 → 2 on gpu0" in reset[0].sentence
    bare = GpuNvLinks(0, (), (), {}, ("pcie_replay",))
    quiet = fabric.compare(_nv((bare,), 0.0), _nv((bare,), 60.0))
    assert [(f.status, f.sentence) for f in quiet] == [
        ("warn", "node1: NVML does not report pcie_replay on gpu0; not checked")
    ]


def test_reads_only_the_gpus_the_caller_exposed(monkeypatch):
    # The local executor's node is the GPUs CUDA_VISIBLE_DEVICES exposes, passed on to the tasks.
    monkeypatch.setenv(NODE_GPUS_ENV, "1")
    gpus, status = fabric_counters.read_nvlink_counters(_Nvml())
    assert status == "ok" and [g.index for g in gpus] == [1]


def test_the_after_snapshot_and_the_kernel_log_come_from_one_task():
    # A recorded tree, and this machine's own kernel log (readable or saying why, never raising).
    both = fabric_counters.snapshot_and_kernel_log(local_context(), root=str(DATA / "before"), nvml=False)
    assert both.node == both.fabric.node == both.kernel_log.node == local_context().hostname
    assert [(p.hca, p.port) for p in both.fabric.ib_ports] == [(f"mlx5_{i}", "1") for i in range(4)]
    assert both.kernel_log.readable or both.kernel_log.why.startswith("/dev/kmsg: ")
    assert pickle.loads(pickle.dumps(both)) == both


# The kernel's AER statistics files as sysfs-bus-pci-devices-aer_stats lays them out.
AER_FILES = {
    "aer_dev_correctable": "RxErr {c}\nBadTLP 0\nBadDLLP 0\nRollover 0\nTimeout 0\nNonFatalErr 0\n"
    "CorrIntErr 0\nHeaderOF 0\nTOTAL_ERR_COR {c}\n",
    "aer_dev_nonfatal": "Undefined 0\nDLP 0\nSDES 0\nTLP 0\nFCP 0\nCmpltTO {n}\nCmpltAbrt 0\nUnxCmplt 0\n"
    "RxOF 0\nMalfTLP 0\nECRC 0\nUnsupReq 0\nACSViol 0\nUncorrIntErr 0\nBlockedTLP 0\nAtomicOpBlocked 0\n"
    "TLPBlockedErr 0\nPoisonTLPBlocked 0\nTOTAL_ERR_NONFATAL {n}\n",
    "aer_dev_fatal": "Undefined 0\nDLP {f}\nSDES 0\nTLP 0\nFCP 0\nCmpltTO 0\nCmpltAbrt 0\nUnxCmplt 0\nRxOF 0\n"
    "MalfTLP 0\nECRC 0\nUnsupReq 0\nACSViol 0\nUncorrIntErr 0\nBlockedTLP 0\nAtomicOpBlocked 0\n"
    "TLPBlockedErr 0\nPoisonTLPBlocked 0\nTOTAL_ERR_FATAL {f}\n",
}


def _pci_tree(tmp_path: Path, c: int = 0, n: int = 0, f: int = 0) -> tuple[Path, Path]:
    """A PCI device folder per GPU 0 (0000:18:00.0) and HCA mlx5_0 (0000:3b:00.0, under the IB
    root through its ``device`` link, as the kernel links it), the HCA's counts given."""
    pci, ib = tmp_path / "pci", tmp_path / "ib"
    for address, counts in (("0000:18:00.0", {"c": 0, "n": 0, "f": 0}), ("0000:3b:00.0", {"c": c, "n": n, "f": f})):
        folder = pci / address
        folder.mkdir(parents=True, exist_ok=True)
        for name, text in AER_FILES.items():
            (folder / name).write_text(text.format(**counts))
    (ib / "mlx5_0").mkdir(parents=True, exist_ok=True)
    link = ib / "mlx5_0" / "device"
    if not link.exists():
        link.symlink_to(pci / "0000:3b:00.0")
    return pci, ib


def test_reads_the_aer_totals_of_each_gpu_and_hca_where_the_kernel_keeps_them(tmp_path):
    pci, ib = _pci_tree(tmp_path, c=4, n=1)
    gpus = (GpuNvLinks(0, (), address="0000:18:00.0"), GpuNvLinks(1, (), address="0000:19:00.0"))  # gpu1: none kept
    found = fabric_counters.read_device_aer(str(ib), gpus, str(pci))
    assert [(a.device, a.address, a.counters) for a in found] == [
        ("gpu0", "0000:18:00.0", {"aer_correctable": 0, "aer_nonfatal": 0, "aer_fatal": 0}),
        ("mlx5_0", "0000:3b:00.0", {"aer_correctable": 4, "aer_nonfatal": 1, "aer_fatal": 0}),
    ]
    snap = replace(_nv(gpus, 1.0), aer=found)
    assert fabric_counters.snapshot_from_dict(asdict(snap)) == snap


def test_nvml_gives_each_gpus_pci_address_as_sysfs_names_it():
    class WithPci(_Nvml):
        def nvmlDeviceGetPciInfo(self, handle: int) -> object:
            return type("PciInfo", (), {"busId": f"00000000:{0x18 + handle:02X}:00.0".encode()})()

    gpus, _ = fabric_counters.read_nvlink_counters(WithPci())
    assert [g.address for g in gpus] == ["0000:18:00.0", "0000:19:00.0"]
    assert [g.address for g in fabric_counters.read_nvlink_counters(_Nvml())[0]] == ["", ""]


def test_an_uncorrectable_aer_error_fails_its_device_and_a_corrected_one_is_recorded(tmp_path):
    pci, ib = _pci_tree(tmp_path / "before")
    gpus = (GpuNvLinks(0, (), address="0000:18:00.0"),)
    before = replace(_nv(gpus, 0.0), aer=fabric_counters.read_device_aer(str(ib), gpus, str(pci)))
    pci, ib = _pci_tree(tmp_path / "after", c=3, n=1)
    after = replace(_nv(gpus, 300.0), aer=fabric_counters.read_device_aer(str(ib), gpus, str(pci)))
    found = fabric.compare(before, after)
    assert [(f.status, f.sentence.split(": a transaction")[0]) for f in found] == [
        ("fail", "node1: PCIe AER non-fatal errors +1 on mlx5_0 over 5 min 0 s (fail > 0)"),
        ("note", "node1: PCIe AER correctable errors 0.01/s on mlx5_0 over 5 min 0 s (recorded, not judged)"),
    ]
    (failed,) = fabric.judged(found)
    assert failed.nodes == ("node1",) and "mlx5_0" in failed.text
    gone = fabric.compare(before, replace(after, aer=after.aer[:1]))
    assert [(f.kind, f.status) for f in gone] == [("missing", "fail")] * 3

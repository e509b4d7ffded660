"""Fabric error counters: reading recorded sysfs trees (tests/data/fabric) and judging two reads."""

from __future__ import annotations

import pickle
import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from pytest_gpucluster.checks import fabric
from pytest_gpucluster.workloads import fabric_counters
from pytest_gpucluster.workloads.context import local_context
from pytest_gpucluster.workloads.fabric_counters import FabricSnapshot, GpuNvLinks, NvLinkCounters

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


def test_one_counter_moves():
    found = fabric.compare(_snap(DATA / "before", 100.0), _snap(DATA / "after_symbol_errors", 915.0))
    assert [f.sentence for f in found] == [
        "node1:mlx5_2 port 1: symbol_error rose 0 → 37 (+37, at most +0 allowed) over 13 min 35 s"
    ]
    assert found[0].fails and found[0].kind == "increase" and found[0].counter == "symbol_error"
    assert fabric.problems(found) == [found[0].sentence] and fabric.warnings(found) == []


def test_bound_allows_the_increase():
    before, after = _snap(DATA / "before", 100.0), _snap(DATA / "after_symbol_errors", 915.0)
    assert fabric.compare(before, after, {"symbol_error": 37}) == []
    assert len(fabric.compare(before, after, {"symbol_error": 36})) == 1


def test_bad_bounds_are_named():
    with pytest.raises(ValueError, match="Perhaps you meant 'symbol_error'"):
        fabric.check_bounds({"symbol_errors": 1})
    with pytest.raises(ValueError, match="'link_downed': -1 is not a whole number"):
        fabric.check_bounds({"link_downed": -1})


def test_reset_is_not_an_increase(tmp_path):
    tree = _copy(tmp_path, "after_clean")
    (tree / "mlx5_1" / "ports" / "1" / "counters" / "link_downed").write_text("0\n")
    found = fabric.compare(_snap(DATA / "before", 100.0), _snap(tree, 145.0))
    assert [(f.kind, f.where, f.counter) for f in found] == [("reset", "node1:mlx5_1 port 1", "link_downed")]
    assert found[0].sentence == (
        "node1:mlx5_1 port 1: link_downed went down 1 → 0 over 45 s: the counter was reset or wrapped, "
        "so its increase during the run is unknown"
    )
    assert found[0].fails


def test_missing_port_and_counter(tmp_path):
    tree = _copy(tmp_path, "after_clean")
    shutil.rmtree(tree / "mlx5_3")
    (tree / "mlx5_0" / "ports" / "1" / "counters" / "port_rcv_errors").unlink()
    found = fabric.compare(_snap(DATA / "before", 100.0), _snap(tree, 160.0))
    assert [f.sentence for f in found] == [
        "node1:mlx5_0 port 1: port_rcv_errors read before the run (0), missing after",
        "node1:mlx5_3 port 1: read before the run, missing after (HCA gone or its driver reset)",
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
    assert [(f.kind, f.where, f.fails) for f in found] == [
        ("saturated", "node1:mlx5_0 port 1", False),
        ("increase", "node1:mlx5_1 port 1", True),
    ]
    assert found[1].sentence.endswith("it is now at its 8-bit maximum, so the true increase may be larger")


def test_unreadable_counter_is_named(tmp_path):
    tree = _copy(tmp_path, "after_clean")
    (tree / "mlx5_2" / "ports" / "1" / "counters" / "symbol_error").write_text("N/A\n")
    found = fabric.compare(_snap(DATA / "before", 0.0), _snap(tree, 30.0))
    assert [(f.kind, f.sentence) for f in found] == [
        ("unreadable", "node1:mlx5_2 port 1: symbol_error is not a number in sysfs; not judged")
    ]


def test_node_missing_after():
    before = [_snap(DATA / "before", 0.0), replace(_snap(DATA / "before", 0.0), node="node2")]
    found = fabric.compare_nodes(before, [_snap(DATA / "after_symbol_errors", 60.0)])
    assert [f.where for f in found] == ["node1:mlx5_2 port 1", "node2"]
    assert found[1].sentence.startswith("node2: fabric counters read before the run, none after")


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
    assert [(f.kind, f.sentence) for f in found] == [
        ("increase", "node1:gpu0 link 1: nvlink_replay rose 0 → 4 (+4, at most +0 allowed) over 1 min 15 s"),
        ("missing", "node1:gpu1: NVLink counters read before the run, GPU missing after"),
        ("unsupported", "node1: NVML does not report nvlink_crc_data on gpu0; not checked"),
        ("unsupported", "node1: NVML does not report nvlink_ecc_data on gpu0; not checked"),
    ]


def test_nvml_unsupported_is_a_warning_not_a_crash():
    status = "unsupported: NVML unusable (NVML Shared Library Not Found)"
    found = fabric.compare(_nv((), 0.0, status), _nv((), 10.0, status))
    assert [(f.kind, f.fails) for f in found] == [("unsupported", False)]
    assert "NVML Shared Library Not Found" in found[0].sentence


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


def test_reads_nvlink_counters_through_nvml():
    gpus, status = fabric_counters.read_nvlink_counters(_Nvml())
    assert status == "ok"
    assert [(g.index, len(g.links)) for g in gpus] == [(0, 2), (1, 2)]
    assert gpus[1].links[1] == NvLinkCounters(
        1, {"nvlink_replay": 11, "nvlink_recovery": 0, "nvlink_crc_flit": 0}, HOPPER_UNSUPPORTED
    )

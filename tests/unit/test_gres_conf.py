"""The GRES warning: a job's GRES indices disagree with its devices only where the node's
gres.conf maps those indices to other device files (tests/data/gres: the test cluster's own
gres.conf of a split machine, and two site styles)."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_gpucluster.checks.gres_conf import gres_order_mismatch, minor_of, node_gpu_files
from pytest_gpucluster.checks.isolation import view_findings
from pytest_gpucluster.workloads.isolation import Device, GpuView

DATA = Path(__file__).resolve().parents[1] / "data" / "gres"


def text(name: str) -> str:
    return (DATA / name).read_text()


def test_each_node_reads_its_own_files_in_the_order_written():
    split = text("testcluster-2x2-real.conf")
    assert node_gpu_files(split, "node1") == ("/dev/nvidia0", "/dev/nvidia1")
    assert node_gpu_files(split, "node2") == ("/dev/nvidia2", "/dev/nvidia3")
    assert node_gpu_files(split, "node3") is None
    pci = text("testcluster-2x2-real-pci-order.conf")
    assert node_gpu_files(pci, "node2") == ("/dev/nvidia3", "/dev/nvidia2")
    site = text("site-typed.conf")
    assert node_gpu_files(site, "gpu-017") == tuple(f"/dev/nvidia{i}" for i in range(8))
    assert node_gpu_files(text("site-autodetect.conf"), "gpu-017") is None
    assert minor_of("/dev/nvidia12") == 12 and minor_of("/dev/null") is None


def test_a_split_node_whose_indices_count_from_zero_is_right():
    # node2 of the 2×2 split holds /dev/nvidia2 and 3 and Slurm names its indices 0 and 1
    assert gres_order_mismatch(text("testcluster-2x2-real.conf"), "node2", ("0", "1"), [2, 3]) is None
    assert gres_order_mismatch(text("testcluster-2x2-real-pci-order.conf"), "node2", ("1",), [2]) is None


def test_devices_other_than_gres_conf_names_are_told():
    assert gres_order_mismatch(text("testcluster-2x2-real.conf"), "node2", ("0",), [3]) == "/dev/nvidia2"
    # an index past the node's files
    assert gres_order_mismatch(text("testcluster-2x2-real.conf"), "node1", ("0", "2"), [0, 1]) == "/dev/nvidia0"


def test_with_autodetect_on_the_order_is_slurms_own_and_not_judged():
    # slurmd sorts the merged list by device file and PCI order: the order written is not the
    # GRES index order, so no job's devices are judged against it.
    merged = text("site-autodetect-with-files.conf")
    assert node_gpu_files(merged, "gpu-017") is None
    assert gres_order_mismatch(merged, "gpu-017", ("0",), [0]) is None
    # A node whose own line turns AutoDetect off keeps the order written.
    assert node_gpu_files(merged, "gpu-099") == ("/dev/nvidia1", "/dev/nvidia0")
    assert gres_order_mismatch(merged, "gpu-099", ("0",), [0]) == "/dev/nvidia1"


def test_nothing_is_judged_without_files_for_the_node():
    assert gres_order_mismatch(text("site-autodetect.conf"), "gpu-017", ("0", "1"), [4, 5]) is None
    assert gres_order_mismatch(None, "node1", ("0",), [3]) is None


def _view(node: str, gres: str | None, minors: list[int], indices: str) -> GpuView:
    devices = tuple(Device(i, f"GPU-{node}-{m}", m) for i, m in enumerate(minors))
    return GpuView(
        node=node,
        rank=0,
        job_id="7",
        cuda_visible_devices=",".join(str(i) for i in range(len(minors))),
        job_gpus=indices,
        step_gpus=indices,
        nvml=devices,
        torch_count=len(minors),
        gres_conf=gres,
    )


@pytest.mark.parametrize("gres", ["testcluster-2x2-real.conf", None])
def test_no_warning_on_a_healthy_split_node(gres):
    view = _view("node2", text(gres) if gres else None, [2, 3], "0,1")
    assert view_findings([(view, 2)], device_cgroups=True) == []


def test_the_warning_names_the_devices_and_gres_conf_files_in_words():
    view = _view("node2", text("testcluster-2x2-real.conf"), [3], "0")
    found = view_findings([(view, 1)], device_cgroups=True)
    assert len(found) == 1 and found[0].severity == "warn" and found[0].culprits == ("node2",)
    sentence = found[0].text
    assert "holds /dev/nvidia3" in sentence and "GRES indices 0 to /dev/nvidia2" in sentence
    assert "[" not in sentence and '("' not in sentence  # no Python literal

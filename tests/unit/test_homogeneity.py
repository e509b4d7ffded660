"""Homogeneity on recorded inventories (16 H100 nodes): messages asserted verbatim."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from pytest_gpucluster.checks import homogeneity as h

CLUSTER = json.loads((Path(__file__).parent.parent / "data" / "inventory_cluster_16xh100.json").read_text())


@pytest.fixture
def cluster() -> dict:
    return copy.deepcopy(CLUSTER)


def test_identical_nodes_have_no_mismatch(cluster):
    assert h.mismatches(cluster) == []


def test_one_odd_driver_is_named_against_the_majority(cluster):
    cluster["worker3"]["driver"] = "550.54.15"
    found = h.mismatches(cluster)
    assert [m.sentence for m in found] == ["worker3: driver 550.54.15 vs 560.35.03 on 15 others"]
    (mine,) = h.findings_for(found, "worker3")
    assert (mine.text, mine.scope, mine.culprits) == (
        "worker3: driver 550.54.15 vs 560.35.03 on 15 others",
        "node",
        ("worker3",),
    )
    assert h.findings_for(found, "worker4") == []


def test_every_differing_fact_of_a_node_is_listed_in_fact_order(cluster):
    cluster["worker11"].update(gpu_count=7, ib_firmware="28.36.1010", kernel="5.15.0-101-generic")
    cluster["worker2"]["cpu_topology"] = "2x48x1"
    assert [m.sentence for m in h.mismatches(cluster)] == [
        "worker11: GPU count 7 vs 8 on 15 others",
        "worker11: kernel 5.15.0-101-generic vs 5.15.0-119-generic on 15 others",
        "worker11: IB firmware 28.36.1010 vs 28.39.2048 on 15 others",
        "worker2: CPU topology (sockets x cores x threads) 2x48x1 vs 2x48x2 on 15 others",
    ]


def test_two_nodes_that_differ_have_no_majority():
    a = {"kernel": "6.1.0-18-amd64"}
    b = {"kernel": "6.1.0-21-amd64"}
    found = h.mismatches({"node1": a, "node2": b})
    assert [m.sentence for m in found] == [
        "node1: kernel 6.1.0-18-amd64 vs 6.1.0-21-amd64 on 1 other (no majority)",
        "node2: kernel 6.1.0-21-amd64 vs 6.1.0-18-amd64 on 1 other (no majority)",
    ]
    (mine,) = h.findings_for(found, "node2")
    assert (mine.scope, mine.nodes, mine.culprits) == ("nodes", ("node2", "node1"), ())  # neither is convicted


def test_three_way_split_names_the_minorities(cluster):
    cluster["worker0"]["nccl"] = "2.20.5"
    cluster["worker1"]["nccl"] = "2.23.4"
    found = h.mismatches(cluster)
    assert [m.sentence for m in found] == [
        "worker0: NCCL 2.20.5 vs 2.21.5 on 14 others",
        "worker1: NCCL 2.23.4 vs 2.21.5 on 14 others",
    ]
    assert [m.finding().culprits for m in found] == [("worker0",), ("worker1",)]


def test_a_reference_of_no_strict_majority_convicts_no_node():
    nodes = {f"n{i}": {"nccl": v} for i, v in enumerate(["2.21.5", "2.21.5", "2.20.5", "2.23.4"])}
    found = h.mismatches(nodes)
    assert [m.sentence for m in found] == [
        "n2: NCCL 2.20.5 vs 2.21.5 on 2 others",
        "n3: NCCL 2.23.4 vs 2.21.5 on 2 others",
    ]
    # 2 of 4 is the most common value but no strict majority: the difference names the nodes together
    assert [(f.scope, f.nodes, f.culprits) for f in (m.finding() for m in found)] == [
        ("nodes", ("n2", "n0", "n1", "n3"), ()),
        ("nodes", ("n3", "n0", "n1", "n2"), ()),
    ]


def test_profile_expectations():
    node = CLUSTER["worker0"]
    good = {
        "gpu_model": "NVIDIA H100 80GB HBM3",
        "gpus_per_node": 8,
        "min_driver": "550.54",
        "min_cuda": "12.4",
        "expect_kernel": "5.15.0-119-generic",
    }
    assert h.profile_findings("worker0", node, **good) == []
    bad = {
        "gpu_model": "NVIDIA H200",
        "gpus_per_node": 4,
        "min_driver": "565.57.01",
        "min_cuda": "12.8",
        "expect_kernel": "6.8.0-45-generic",
    }
    found = h.profile_findings("worker0", node, **bad)
    assert {(f.scope, f.culprits) for f in found} == {("node", ("worker0",))}
    assert [f.text for f in found] == [
        "worker0: GPU model NVIDIA H100 80GB HBM3, profile expects NVIDIA H200",
        "worker0: 8 GPUs visible to NVML, profile expects 4",
        "worker0: driver 560.35.03 is older than the profile's min_driver 565.57.01",
        "worker0: CUDA 12.6 is older than the profile's min_cuda 12.8",
        "worker0: kernel 5.15.0-119-generic, profile expects 6.8.0-45-generic",
    ]


def test_gres_only_gpus_are_not_checked_against_nvml():
    cpu_node = {"gpu_model": "none", "gpu_count": 0, "driver": "n/a", "kernel": "6.1.0"}
    assert h.profile_findings("node1", cpu_node, gpus_per_node=4, gpus_are_real=False, min_driver="550") == []
    assert [f.text for f in h.profile_findings("node1", cpu_node, gpus_per_node=4, min_driver="550")] == [
        "node1: 0 GPUs visible to NVML, profile expects 4",
        "node1: driver n/a is older than the profile's min_driver 550",
    ]


def test_memory_deviation_from_median_and_from_expected(cluster):
    cluster["worker7"]["memory_gib"] = 1511.67  # a DIMM bank missing
    dev = h.memory_deviation(cluster)
    assert dev["worker7"].percent == pytest.approx(25.0, abs=0.1)
    assert dev["worker7"].detail == "RAM 1511.67 GiB vs median 2015.55 GiB"
    assert dev["worker0"].percent < 0.01
    expected = h.memory_deviation({"node1": {"memory_gib": 7.75}}, expected_gib=64)
    assert expected["node1"].percent == pytest.approx(87.9, abs=0.1)
    assert expected["node1"].detail == "RAM 7.75 GiB vs expected 64 GiB"
    assert h.memory_deviation({"node1": {"memory_gib": "n/a"}}) == {}


def test_sizing_per_gpu(cluster):
    sizing = h.per_gpu_sizing(cluster["worker0"])
    assert sizing is not None
    assert sizing.cpus_per_gpu == 24
    assert sizing.memory_gib_per_gpu == pytest.approx(251.9, abs=0.1)
    assert h.per_gpu_sizing({"gpu_count": 0, "logical_cpus": 2, "memory_gib": 8}) is None


def test_version_tuple():
    assert h.version_tuple("560.35.03") == (560, 35, 3)
    assert h.version_tuple("n/a") is None

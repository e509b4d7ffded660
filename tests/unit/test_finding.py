"""Findings as data: the scope, the nodes named and the culprits travel as fields and decide which
node a finding convicts; the sentence is never read back."""

from __future__ import annotations

import pytest

from pytest_gpucluster.config import Threshold
from pytest_gpucluster.results import codec
from pytest_gpucluster.verdict import Finding, Measurement, judge


def test_a_finding_on_a_gpu_port_or_node_convicts_that_node():
    gpu = Finding.on_node("node7", "node7:gpu3: ECC errors", gpu=3)
    port = Finding.on_node("node7", "node7 mlx5_0/1: port down", port="mlx5_0/1")
    node = Finding.on_node("node7", "node7: 7 GPUs visible")
    assert (gpu.scope, port.scope, node.scope) == ("gpu", "port", "node")
    assert gpu.convicts == port.convicts == node.convicts == ("node7",)
    assert (gpu.place, port.place) == ("node7:gpu3", "node7 mlx5_0/1")


def test_a_finding_across_nodes_convicts_only_its_isolated_culprits():
    unknown = Finding.across(["node1", "node2"], "node1+node2: busbw below the line")
    isolated = Finding.across(["node1", "node2", "node3"], "busbw below the line", culprits=["node3", "node9"])
    assert unknown.convicts == () and unknown.nodes == ("node1", "node2")
    assert isolated.convicts == ("node3",)  # a culprit must be a node it names


def test_outside_the_nodes_and_warnings_convict_nobody():
    config = Finding.outside("config", "NCCL_SOCKET_IFNAME=ib9 matches no interface", nodes=["node1"], setting="env.X")
    assert config.convicts == () and config.nodes == ("node1",) and config.setting == "env.X"
    assert Finding.on_node("node1", "warm", severity="warn").convicts == ()
    with pytest.raises(ValueError, match="scope of the nodes"):
        Finding.outside("node", "x")


def test_a_switch_or_a_link_names_switches_as_culprits_and_convicts_no_node():
    leaf = Finding.in_network("switch", ["leaf2"], ["node3", "node4"], "leaf leaf2: slow")
    path = Finding.in_network("link", ["leaf1", "leaf2"], ["node1", "node3"], "the path between leaf1 and leaf2: slow")
    assert (leaf.culprits, leaf.convicts, leaf.place) == (("leaf2",), (), "leaf2")
    assert (path.nodes, path.convicts, path.place) == (("node1", "node3"), (), "leaf1–leaf2")
    assert codec.decode_finding(codec.encode_finding(path)) == path
    with pytest.raises(ValueError, match="not a scope of the network"):
        Finding.in_network("nodes", ["leaf1"], ["node1"], "x")


def test_a_finding_round_trips_through_the_results_file():
    found = Finding.on_node("node1", "slow", gpu=2, metric="compute.matmul_bf16", value=300.0, unit="TFLOP/s")
    data = codec.encode_finding(found)
    assert data["nodes"] == ["node1"] and data["culprits"] == ["node1"] and data["gpu"] == 2
    assert codec.decode_finding(data) == found


def test_a_verdict_past_its_line_is_a_finding_of_the_measured_place():
    line = Threshold("compute.matmul_bf16", "TFLOP/s", fail_below=600.0, source="t.toml")
    at = judge(Measurement.at("compute.matmul_bf16", 300.0, "TFLOP/s", "node1", gpu=2), line).finding()
    assert at is not None and (at.scope, at.convicts, at.gpu, at.value) == ("gpu", ("node1",), 2, 300.0)
    pair = Measurement.across("nccl.all_reduce.inter_node", 1.0, "TFLOP/s", ["node1", "node2"], culprits=["node2"])
    across = judge(pair, line).finding()
    assert across is not None and across.scope == "nodes" and across.convicts == ("node2",)
    assert judge(Measurement.at("compute.matmul_bf16", 700.0, "TFLOP/s", "node1"), line).finding() is None

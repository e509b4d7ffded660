"""The shared node probe: every part read on this machine, one part's exception kept in its place,
and the login-side helpers that turn a reading (or its absence) into a test's words."""

from __future__ import annotations

import socket

import pytest

from pytest_gpucluster.probe_checks import good, reading_of
from pytest_gpucluster.workloads import gpu_health, node_probe
from pytest_gpucluster.workloads.context import TaskContext
from pytest_gpucluster.workloads.gpu_health import NodeGpus
from pytest_gpucluster.workloads.infiniband import IbNode
from pytest_gpucluster.workloads.inventory import NodeInventory


def _ctx() -> TaskContext:
    host = socket.gethostname()
    return TaskContext("1", 0, 0, 0, 1, 1, host, (host,), host, 29500)


def test_every_part_is_read_on_this_machine():
    probe = node_probe.probe_node(_ctx(), shared_fs="/tmp")
    assert probe.node == socket.gethostname()
    assert set(probe.parts) == set(node_probe.PARTS)
    assert isinstance(probe.parts["gpu_health"], NodeGpus)
    assert isinstance(probe.parts["infiniband"], IbNode)
    inventory = probe.parts["inventory"]
    assert isinstance(inventory, NodeInventory) and inventory.node == probe.node
    assert probe.parts["dcgmi"] is None or probe.parts["dcgmi"].endswith("dcgmi")


def test_a_part_that_raises_leaves_the_others(monkeypatch):
    def broken(ctx):
        raise RuntimeError("nvmlInit hung up")

    monkeypatch.setattr(gpu_health, "read_node", broken)
    probe = node_probe.probe_node(_ctx(), parts=("gpu_health", "infiniband"))
    err = probe.parts["gpu_health"]
    assert err == node_probe.PartError("gpu_health", probe.node, "RuntimeError: nvmlInit hung up")
    assert isinstance(probe.parts["infiniband"], IbNode)


def test_an_unknown_part_is_refused_before_anything_is_read():
    with pytest.raises(ValueError, match=r"unknown probe part\(s\) gpu_heath; known: gpu_health, infiniband"):
        node_probe.probe_node(_ctx(), parts=("gpu_heath",))


def test_reading_of_names_the_node_and_why():
    found = {"node1": "ok", "node2": node_probe.PartError("inventory", "node2", "OSError: /proc/meminfo: EIO")}
    assert good(found) == {"node1": "ok"}
    assert reading_of(found, "node1", "inventory") == "ok"
    with pytest.raises(pytest.fail.Exception, match=r"node2: reading inventory failed there: OSError: /proc/meminfo"):
        reading_of(found, "node2", "inventory")
    with pytest.raises(pytest.fail.Exception, match=r"node3: no inventory came back \(nodes that answered: node1\)"):
        reading_of(found, "node3", "inventory")

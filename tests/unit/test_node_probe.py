"""The shared node probe: every part read on this machine, one part's exception kept in its place,
and the login-side helpers that turn a reading (or its absence) into a test's words."""

from __future__ import annotations

import socket
import threading
import time

import pytest

from pytest_gpucluster.checks.probe import good, missing
from pytest_gpucluster.workloads import gpu_health, node_gpus, node_probe
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


def test_a_missing_reading_names_the_node_and_why():
    found = {"node1": "ok", "node2": node_probe.PartError("inventory", "node2", "OSError: /proc/meminfo: EIO")}
    assert good(found) == {"node1": "ok"}
    assert missing(found, "node1", "inventory") is None
    assert missing(found, "node2", "inventory") == "node2: reading inventory failed there: OSError: /proc/meminfo: EIO"
    assert missing(found, "node3", "inventory") == "node3: no inventory came back (nodes that answered: node1)"


def _task(local_rank: int, job_id: str) -> TaskContext:
    host = socket.gethostname()
    return TaskContext(job_id, local_rank, local_rank, 0, 2, 1, host, (host,), host, 29500)


def test_in_the_shared_job_the_other_tasks_wait_until_the_gpus_were_read_at_rest(monkeypatch, tmp_path):
    # The probe riding in the intra-node job: the node's first task reads GPU health before any
    # task of the node may create a CUDA context; the others wait at the gate, then go on.
    monkeypatch.setattr(node_gpus, "gate_dir", lambda: tmp_path)
    order: list[str] = []
    real_read = gpu_health.read_node

    def read_at_rest(ctx):
        time.sleep(0.3)  # the second task is at the gate by now
        order.append("read at rest")
        return real_read(ctx)

    monkeypatch.setattr(gpu_health, "read_node", read_at_rest)
    second: list[object] = []

    def second_task():
        second.append(node_gpus.probe_first(_task(1, "77")))
        order.append("second task past the gate")

    waiting = threading.Thread(target=second_task)
    waiting.start()
    time.sleep(0.1)
    assert waiting.is_alive() and not node_gpus.gate_path(_task(1, "77")).exists()
    probe = node_gpus.probe_first(_task(0, "77"), shared_fs="/tmp")
    waiting.join(5)
    assert not waiting.is_alive() and second == [None]
    assert order.index("read at rest") < order.index("second task past the gate")
    assert probe is not None and set(probe.parts) == set(node_probe.PARTS)
    assert isinstance(probe.parts["inventory"], NodeInventory)


def test_a_task_whose_node_is_never_read_stops_at_the_gate_naming_the_node(monkeypatch, tmp_path):
    monkeypatch.setattr(node_gpus, "gate_dir", lambda: tmp_path)
    started = time.monotonic()
    with pytest.raises(
        TimeoutError,
        match=rf"{socket.gethostname()}: the node's first task did not read its GPUs "
        r"at rest within 0 s .*never appeared",
    ):
        node_gpus.probe_first(_task(1, "78"), gate_timeout_s=0.2)
    assert time.monotonic() - started < 2.0

"""Slurm health decisions on outputs recorded from the project's Slurm 22.05 test cluster."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from pytest_gpucluster import slurm

DATA = Path(__file__).parent.parent / "data" / "slurm"


def _nodes(name: str) -> list[slurm.NodeInfo]:
    return slurm.parse_nodes(json.loads((DATA / name).read_text()))


def test_parse_nodes_reads_sinfo_json_of_22_05():
    nodes = _nodes("sinfo-22.05-healthy.json")
    assert [n.name for n in nodes] == ["node1", "node2"]
    n = nodes[0]
    assert (n.state, n.partitions, n.gres, n.gpus) == ("IDLE", ("debug",), "gpu:4", 4)
    assert (n.cpus, n.real_memory_mb) == (4, 4000)
    assert all(n.usable for n in nodes)


def test_drained_node_is_named_with_state_and_reason():
    nodes = _nodes("sinfo-22.05-node2-drained.json")
    assert nodes[1].state == "IDLE+DRAIN"
    assert not nodes[1].usable
    found = slurm.node_state_findings(nodes, partition="debug", expected=2)
    assert [(f.text, f.scope, f.nodes, f.culprits) for f in found] == [
        ("node2: state IDLE+DRAIN, reason: 'integration test'", "node", ("node2",), ("node2",)),
        # the shortfall names the partition's nodes together; its culprit is the one not usable,
        # so a healthy partner is never convicted by it
        ("partition 'debug' has 1 usable node(s) of 2 expected", "nodes", ("node1", "node2"), ("node2",)),
    ]


def test_healthy_partition_has_no_problems():
    assert slurm.node_state_findings(_nodes("sinfo-22.05-healthy.json"), partition="debug", expected=2) == []


def test_nodelist_names_missing_nodes():
    found = slurm.node_state_findings(
        _nodes("sinfo-22.05-healthy.json"), partition="debug", expected=2, nodelist=("node1", "node9")
    )
    assert [f.text for f in found] == [
        "node9: not in partition 'debug'",
        "partition 'debug' has 1 usable node(s) of 2 expected",
    ]
    assert (found[0].culprits, found[1].nodes, found[1].culprits) == (("node9",), ("node1", "node9"), ("node9",))


def test_parse_nodes_reads_the_23_02_shape():
    # From 23.02, `scontrol --json show nodes`: state is a list and numbers may be {"set", "number"}.
    data = {
        "nodes": [
            {
                "name": "gpu-7",
                "state": ["DOWN", "NOT_RESPONDING"],
                "reason": "Not responding",
                "partitions": ["gpu"],
                "gres": "gpu:h100:8(S:0-1)",
                "cpus": 128,
                "real_memory": {"set": True, "infinite": False, "number": 1600000},
            }
        ]
    }
    (n,) = slurm.parse_nodes(data)
    assert (n.state, n.gpus, n.real_memory_mb, n.usable) == ("DOWN+NOT_RESPONDING", 8, 1600000, False)
    assert slurm.node_state_findings([n], partition="gpu", expected=1)[0].text == (
        "gpu-7: state DOWN+NOT_RESPONDING, reason: 'Not responding'"
    )


def test_resources_against_the_profile():
    nodes = _nodes("sinfo-22.05-healthy.json")
    assert slurm.node_resource_findings(nodes, gpus=4, min_cpus=4, min_memory_mb=4000) == []
    found = slurm.node_resource_findings(nodes[:1], gpus=8, min_cpus=16, min_memory_mb=8192)
    assert [f.text for f in found] == [
        "node1: advertises 4 GPU(s) (Gres=gpu:4), expected 8",
        "node1: advertises 4 CPUs, the profile's jobs need 16",
        "node1: advertises RealMemory=4000 MB, the profile's jobs need 8192 MB",
    ]
    # every node advertises it so: Slurm's setup (or the profile), named together, no culprit
    assert {(f.scope, f.culprits) for f in found} == {("nodes", ())}
    odd = slurm.NodeInfo("node3", "IDLE", "", ("debug",), "gpu:3", 4, 4000)
    (found,) = slurm.node_resource_findings([nodes[0], odd], gpus=4)
    assert (found.text, found.scope, found.culprits) == (
        "node3: advertises 3 GPU(s) (Gres=gpu:3), expected 4",
        "node",
        ("node3",),
    )  # 1 of 2, the other as expected: that node's own
    found = slurm.node_resource_findings([*nodes, odd], gpus=3)
    assert [(f.scope, set(f.nodes), f.culprits) for f in found] == [
        ("nodes", {"node1", "node2"}, ())
    ] * 2  # the setup's


def test_node_spread_names_the_odd_node():
    a, b = _nodes("sinfo-22.05-healthy.json")
    odd = slurm.NodeInfo("node3", "IDLE", "", ("debug",), "gpu:3", 4, 4000)
    assert slurm.node_spread([a, b]) == []
    (warned,) = slurm.node_spread([a, b, odd])
    assert warned.text == "node3: CPUs=4 RealMemory=4000 MB GPUs=3, most nodes have CPUs=4 RealMemory=4000 MB GPUs=4"
    assert (warned.severity, warned.nodes) == ("warn", ("node3",))


def test_partition_state_from_scontrol_text():
    found = slurm.parse_partitions((DATA / "scontrol-show-partition-debug.txt").read_text())
    assert found == [slurm.PartitionInfo("debug", "UP", True, "node[1-2]", 2, max_time_s=3600.0)]  # MaxTime=01:00:00
    assert slurm.partition_findings("debug", found) == []
    assert slurm.partition_findings(None, found) == []
    assert slurm.default_partition(found) == "debug"
    (missing,) = slurm.partition_findings("gpu", found)
    assert (missing.text, missing.scope, missing.setting) == (
        "partition 'gpu' does not exist (partitions: debug)",
        "config",
        "partition",
    )
    down = [slurm.PartitionInfo("debug", "DOWN", True, "node[1-2]", 2)]
    (found_down,) = slurm.partition_findings("debug", down)
    assert found_down.text == "partition 'debug' is DOWN, not UP (scontrol update partitionname=debug state=up)"
    assert (found_down.scope, found_down.severity, found_down.convicts) == ("controller", "fail", ())


def test_ping_output():
    assert slurm.parse_ping((DATA / "scontrol-ping-up.txt").read_text()) == []
    text = "Slurmctld(primary) at ctl1 is UP\nSlurmctld(backup) at ctl2 is DOWN\n"
    (down,) = slurm.parse_ping(text)
    # the controller's: a failure that convicts no node
    assert (down.text, down.scope, down.severity, down.nodes, down.convicts) == (
        "Slurmctld(backup) at ctl2 is DOWN (scontrol ping)",
        "controller",
        "fail",
        (),
        (),
    )
    assert [f.text for f in slurm.parse_ping("")] == [
        "`scontrol ping` printed nothing; is slurmctld configured (SlurmctldHost)?"
    ]


def test_controller_job_record_says_how_an_ended_job_ended():
    # Recorded on the test cluster without accounting: a 2-task job whose rank 1 exited with 17.
    record = slurm.parse_controller_job((DATA / "scontrol-show-job-failed.txt").read_text())
    assert record == {"JobState": "FAILED", "ExitCode": "17:0", "NodeList": "node1", "Reason": "NonZeroExitCode"}
    assert slurm.parse_controller_job("") == {}


def test_a_drain_reason_is_one_bounded_line_naming_the_check_and_evidence():
    from pytest_gpucluster import slurm

    reason = slurm.drain_reason("rejected", "node2: mlx5_3 port 1 is DOWN\n (test_infiniband.py::test_ports[node2])")
    assert reason == "pytest-gpucluster: rejected: node2: mlx5_3 port 1 is DOWN (test_infiniband.py::test_ports[node2])"
    assert len(slurm.drain_reason("rejected", "x" * 1000)) == slurm.DRAIN_REASON_CHARS


def test_a_hostlist_is_read_without_slurm_keeping_zero_padding():
    assert slurm.parse_hostlist("gpu-[01-03,07],login1") == ("gpu-01", "gpu-02", "gpu-03", "gpu-07", "login1")
    assert slurm.parse_hostlist("node4") == ("node4",)
    assert slurm.parse_hostlist("node[1-3,7]") == ("node1", "node2", "node3", "node7")
    assert slurm.parse_hostlist("gpu-[03,11], gpu-11,,login1") == ("gpu-03", "gpu-11", "login1")
    assert slurm.parse_hostlist("rack[1-2]n[1-2]") == ("rack1n1", "rack1n2", "rack2n1", "rack2n2")  # as Slurm
    for bad, said in (
        ("node[a-b]", "'a-b' in 'node[a-b]' is not a number"),
        ("x]", "']' at character 2 closes no '['"),
        ("node[", "'[' at character 5 is never closed"),
        ("gpu-[03,11", "'[' at character 5 is never closed"),
        ("node[3-1]", "'3-1' in 'node[3-1]' counts down; write 1-3"),
        ("node[]", "empty brackets in 'node[]'"),
        ("n[[1]]", "'[' at character 3 opens inside another '['"),
        ("node1;reboot", "'node1;reboot' is not a host name"),
        ("node[1-999999]", "names more than 65536 nodes"),
        ("", "no node named"),
    ):
        with pytest.raises(ValueError, match=re.escape(said)):
            slurm.parse_hostlist(bad)

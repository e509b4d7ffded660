"""Network settings that match nothing on a node (workloads/net_settings.py): NCCL's and gloo's
selection rules, and the record a task leaves for the login side."""

from __future__ import annotations

import pickle

from pytest_gpucluster.workloads.net_settings import SettingMatchesNothing, SettingMismatch, mismatches, selects

IFACES = ["eth0", "ib0", "ib1", "lo"]


def test_nccl_selection_by_prefix_exclusion_and_exact_name():
    assert selects("ib", IFACES) == ["ib0", "ib1"]
    assert selects("eth,ib1", IFACES) == ["eth0", "ib1"]
    assert selects("^lo,docker", IFACES) == ["eth0", "ib0", "ib1"]
    assert selects("=ib", IFACES) == []
    assert selects("=ib0", IFACES) == ["ib0"]
    assert selects("mlx5_1:1,mlx5_3:1", ["mlx5_0", "mlx5_1", "mlx5_3"]) == ["mlx5_1", "mlx5_3"]


def test_a_setting_that_matches_nothing_names_itself_and_what_the_node_has():
    found = mismatches({"NCCL_SOCKET_IFNAME": "ib9"}, IFACES, [], "node1", "nccl")
    assert found == [SettingMismatch("node1", "NCCL_SOCKET_IFNAME", "ib9", tuple(IFACES))]
    assert (
        found[0].sentence()
        == "NCCL_SOCKET_IFNAME=ib9 matches no network interface of node1 (it has eth0, ib0, ib1, lo)"
    )
    assert mismatches({"NCCL_SOCKET_IFNAME": "ib"}, IFACES, [], "node1", "nccl") == []


def test_each_backend_is_checked_for_the_settings_it_reads():
    env = {"NCCL_SOCKET_IFNAME": "ib9", "GLOO_SOCKET_IFNAME": "eth0", "NCCL_IB_HCA": "mlx5_9"}
    assert mismatches(env, IFACES, ["mlx5_0"], "n", "gloo") == []  # gloo reads GLOO_SOCKET_IFNAME only
    assert [m.variable for m in mismatches(env, IFACES, ["mlx5_0"], "n", "nccl")] == [
        "NCCL_SOCKET_IFNAME",
        "NCCL_IB_HCA",
    ]
    assert [m.variable for m in mismatches({"GLOO_SOCKET_IFNAME": "eth"}, IFACES, [], "n", "gloo")] == [
        "GLOO_SOCKET_IFNAME"  # gloo names an interface exactly
    ]
    assert mismatches({"NCCL_IB_HCA": "mlx5_9"}, IFACES, [], "n", "nccl") == []  # no HCA: NCCL uses no IB


def test_the_error_travels_pickled_with_its_record():
    record = SettingMismatch("node1", "NCCL_SOCKET_IFNAME", "ib9", ("eth0", "lo"))
    error = pickle.loads(pickle.dumps(SettingMatchesNothing(record)))
    assert error.record == record and str(error) == record.sentence()

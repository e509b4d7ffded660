"""Rendering of the test cluster's configuration files (pure functions)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpucluster_testcluster import cli, config
from gpucluster_testcluster.config import ClusterSpec, Paths
from gpucluster_testcluster.state import parse_sinfo


def conf_lines(text: str) -> dict[str, str]:
    """Single-valued ``Key=value`` lines (NodeName/PartitionName excluded)."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        if line.startswith("#") or " " in line or "=" not in line:
            continue
        key, value = line.split("=", 1)
        out[key] = value
    return out


def spec(**kw: object) -> ClusterSpec:
    base: dict[str, object] = {"controller_host": "ctl", "paths": Paths(state_dir=Path("/st"))}
    base.update(kw)
    return ClusterSpec(**base)  # type: ignore[arg-type]


def test_defaults_are_the_documented_ones() -> None:
    assert Path("/var/lib/gpucluster-testcluster") == config.DEFAULT_STATE_DIR
    assert Path("/srv/gpucluster-ci/shared") == config.DEFAULT_SHARED_DIR
    assert (config.CLUSTER_NAME, config.PARTITION, config.BRIDGE) == ("gpuci", "debug", "gcbr0")
    assert Paths().slurm_conf == Path("/var/lib/gpucluster-testcluster/etc/slurm.conf")
    s = ClusterSpec()
    assert (s.nodes, s.gpus_per_node, s.gpu_mode) == (2, 4, "fake")


def test_node_names_and_addresses() -> None:
    assert config.node_names(3) == ("node1", "node2", "node3")
    assert [str(config.node_address(i)) for i in range(3)] == ["10.211.0.11", "10.211.0.12", "10.211.0.13"]
    assert config.hostlist(("node1",)) == "node1"
    assert config.hostlist(config.node_names(4)) == "node[1-4]"
    with pytest.raises(ValueError):
        config.node_names(0)


def test_the_netns_network_holds_243_nodes_and_the_host_network_more() -> None:
    config.check_node_count(243, "netns")
    with pytest.raises(ValueError, match="too many nodes for the netns network: 244"):
        config.check_node_count(244, "netns")
    config.check_node_count(256, "host")  # one loopback address, a slurmd port each
    assert config.node_names(256)[-1] == "node256"


@pytest.mark.parametrize("name", ["", "Node1", "node 1", "node1;rm", "a" * 11, "1node"])
def test_invalid_node_names_rejected(name: str) -> None:
    with pytest.raises(ValueError):
        config.validate_node_name(name)


def test_slurm_conf_fake_mode() -> None:
    text = config.render_slurm_conf(spec())
    kv = conf_lines(text)
    assert kv["ClusterName"] == "gpuci"
    assert kv["SlurmctldHost"] == "ctl(10.211.0.1)"
    assert kv["ProctrackType"] == "proctrack/linuxproc"
    assert kv["TaskPlugin"] == "task/none"
    assert kv["SchedulerParameters"] == "batch_sched_delay=0"
    assert kv["SlurmdParameters"] == "config_overrides"
    assert kv["ReturnToService"] == "2"
    assert kv["GresTypes"] == "gpu"
    assert kv["AuthInfo"] == "socket=/st/munge/munge.socket"
    assert kv["AccountingStorageType"] == "accounting_storage/slurmdbd"
    assert kv["AccountingStoragePass"] == "/st/munge/munge.socket"
    assert "NodeName=node1 NodeAddr=10.211.0.11 NodeHostname=node1 CPUs=4 RealMemory=4000 Gres=gpu:4" in text
    assert "NodeName=node2 NodeAddr=10.211.0.12" in text
    assert "PartitionName=debug Nodes=node[1-2] Default=YES MaxTime=60 State=UP" in text


def test_slurm_conf_real_mode_without_accounting() -> None:
    kv = conf_lines(config.render_slurm_conf(spec(gpu_mode="real", accounting=False)))
    assert kv["ProctrackType"] == "proctrack/cgroup"
    assert kv["TaskPlugin"] == "task/cgroup,task/affinity"
    assert kv["AccountingStorageType"] == "accounting_storage/none"
    assert "AccountingStorageHost" not in kv


def test_no_gres_when_no_gpus() -> None:
    s = spec(gpus_per_node=0)
    assert "Gres=" not in config.render_slurm_conf(s)
    assert "Name=gpu" not in config.render_gres_conf(s)


def test_gres_conf_fake_uses_char_devices_in_state_dir() -> None:
    text = config.render_gres_conf(spec(nodes=2, gpus_per_node=4))
    assert "AutoDetect=off" in text
    assert "NodeName=node1 Name=gpu File=/st/dev/gpu[0-3]" in text
    # Each node its own files, so a node can be kept from opening the others' (docs/testcluster.md).
    assert "NodeName=node2 Name=gpu File=/st/dev/gpu[4-7]" in text


def test_gres_conf_real_disjoint_when_enough_gpus() -> None:
    text = config.render_gres_conf(spec(gpu_mode="real", nodes=2, gpus_per_node=2, real_gpu_count=4))
    assert "NodeName=node1 Name=gpu File=/dev/nvidia[0-1]" in text
    assert "NodeName=node2 Name=gpu File=/dev/nvidia[2-3]" in text


def test_gres_conf_real_shared_when_too_few_gpus() -> None:
    text = config.render_gres_conf(spec(gpu_mode="real", nodes=2, gpus_per_node=4, real_gpu_count=4))
    assert "NodeName=node1 Name=gpu File=/dev/nvidia[0-3]" in text
    assert "NodeName=node2 Name=gpu File=/dev/nvidia[0-3]" in text
    single = config.render_gres_conf(spec(gpu_mode="real", nodes=1, gpus_per_node=1, real_gpu_count=1))
    assert "File=/dev/nvidia0\n" in single


def test_cgroup_conf() -> None:
    real = conf_lines(config.render_cgroup_conf(spec(gpu_mode="real")))
    assert real["CgroupPlugin"] == "cgroup/v2"
    assert real["IgnoreSystemd"] == "yes"
    assert real["ConstrainDevices"] == "yes"
    loose = conf_lines(config.render_cgroup_conf(spec(gpu_mode="real", constrain_devices=False)))
    assert loose["ConstrainDevices"] == "no"
    fake = conf_lines(config.render_cgroup_conf(spec()))
    assert fake["ConstrainDevices"] == "no"


def test_slurmdbd_conf_and_sql() -> None:
    kv = conf_lines(config.render_slurmdbd_conf(spec(), "abc123"))
    assert kv["StoragePass"] == "abc123"
    assert kv["StorageHost"] == "127.0.0.1"
    assert kv["StoragePort"] == str(config.MARIADB_PORT)
    assert kv["DbdPort"] == str(config.SLURMDBD_PORT)
    assert kv["PidFile"] == "/st/run/slurmdbd.pid"
    sql = config.render_mariadb_setup_sql("abc123")
    assert "'slurm'@'127.0.0.1' IDENTIFIED BY 'abc123'" in sql
    with pytest.raises(ValueError):
        config.render_mariadb_setup_sql("x'; DROP")


def test_hosts_block_roundtrip() -> None:
    original = "127.0.0.1 localhost\n::1 localhost"
    added = config.add_hosts_block(original, ("node1", "node2"))
    assert added.endswith(
        "# BEGIN gpucluster-testcluster\n10.211.0.11 node1\n10.211.0.12 node2\n# END gpucluster-testcluster\n"
    )
    # Adding again replaces the block instead of stacking a second one.
    assert config.add_hosts_block(added, ("node1", "node2")) == added
    assert config.strip_hosts_block(added) == original + "\n"
    assert config.strip_hosts_block(original) == original


def test_host_network_puts_every_node_on_loopback_with_its_own_port() -> None:
    s = spec(nodes=2, network="host")
    text = config.render_slurm_conf(s)
    assert conf_lines(text)["SlurmctldHost"] == "ctl(127.0.0.1)"
    node_lines = [line for line in text.splitlines() if line.startswith("NodeName=")]
    assert node_lines[0].startswith("NodeName=node1 NodeAddr=127.0.0.1 NodeHostname=node1 Port=16830 ")
    assert node_lines[1].startswith("NodeName=node2 NodeAddr=127.0.0.1 NodeHostname=node2 Port=16831 ")
    hosts = config.add_hosts_block("", s.node_names, (s.node_addr(0), s.node_addr(1)))
    assert "127.0.0.1 node1\n127.0.0.1 node2\n" in hosts
    # The namespaced default keeps one address per node and the global SlurmdPort.
    assert " Port=" not in config.render_slurm_conf(spec(nodes=2))
    with pytest.raises(ValueError, match="network must be"):
        spec(network="bridge")


def test_cli_takes_the_network_mode() -> None:
    assert cli.build_parser().parse_args(["up", "--network", "host"]).network == "host"
    assert cli.build_parser().parse_args(["up"]).network == "netns"


def test_invalid_spec_rejected() -> None:
    with pytest.raises(ValueError):
        spec(gpu_mode="virtual")
    with pytest.raises(ValueError):
        spec(controller_host="bad host")
    with pytest.raises(ValueError):
        spec(gpus_per_node=-1)


def test_parse_sinfo() -> None:
    states = parse_sinfo("node2|idle*|idle\nnode10|alloc|allocated\nnode1|mix|mixed\nnode1|mix|mixed\n")
    assert [(s.name, s.state, s.responding) for s in states] == [
        ("node1", "mixed", True),
        ("node2", "idle", False),
        ("node10", "allocated", True),
    ]
    assert [s.healthy for s in states] == [True, False, True]


def test_cli_defaults() -> None:
    args = cli.build_parser().parse_args(["up"])
    assert (args.nodes, args.gpus_per_node, args.gpu_mode) == (2, 4, "fake")
    assert args.state_dir == config.DEFAULT_STATE_DIR
    assert not args.no_accounting

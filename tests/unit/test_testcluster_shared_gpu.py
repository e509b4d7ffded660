"""The test cluster's configs when nodes share one GPU, and when a node's GPUs are hidden from
Slurm (pure rendering; the GPU machine runs the real thing)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpucluster_testcluster import cli, config
from gpucluster_testcluster.config import ClusterSpec, Paths
from gpucluster_testcluster.state import spec_json as _spec_json


def spec(**kw: object) -> ClusterSpec:
    base: dict[str, object] = {"controller_host": "ctl", "paths": Paths(state_dir=Path("/st"))}
    base.update(kw)
    return ClusterSpec(**base)  # type: ignore[arg-type]


def node_lines(text: str) -> dict[str, str]:
    return {
        line.split()[0].removeprefix("NodeName="): line for line in text.splitlines() if line.startswith("NodeName=")
    }


def test_two_nodes_share_the_one_gpu_of_the_machine_with_device_cgroups() -> None:
    s = spec(nodes=2, gpus_per_node=1, gpu_mode="real", real_gpu_count=1, shared_gpus=True, accounting=False)
    gres = config.render_gres_conf(s)
    assert gres.splitlines()[1:] == [
        "AutoDetect=off",
        "NodeName=node1 Name=gpu File=/dev/nvidia0",
        "NodeName=node2 Name=gpu File=/dev/nvidia0",
    ]
    slurm = config.render_slurm_conf(s)
    nodes = node_lines(slurm)
    assert " Gres=gpu:1 " in nodes["node1"] and " Gres=gpu:1 " in nodes["node2"]
    assert "NodeAddr=10.211.0.11 " in nodes["node1"] and "NodeAddr=10.211.0.12 " in nodes["node2"]
    assert "TaskPlugin=task/cgroup,task/affinity" in slurm.splitlines()
    assert "ConstrainDevices=yes" in config.render_cgroup_conf(s).splitlines()


def test_sharing_is_kept_where_the_machine_has_a_gpu_for_every_node() -> None:
    shared = spec(nodes=2, gpus_per_node=2, gpu_mode="real", real_gpu_count=4, shared_gpus=True)
    assert [shared.gpu_files(i) for i in range(2)] == ["/dev/nvidia[0-1]", "/dev/nvidia[0-1]"]
    own = spec(nodes=2, gpus_per_node=2, gpu_mode="real", real_gpu_count=4)
    assert [own.gpu_files(i) for i in range(2)] == ["/dev/nvidia[0-1]", "/dev/nvidia[2-3]"]


def test_the_node_interface_jobs_name_for_nccl_is_the_veths_inside_end() -> None:
    assert config.NODE_IFACE == "eth0"
    assert len(config.veth_name("node10")) <= 15


def test_a_node_whose_gpus_are_hidden_gets_no_gres_and_no_gres_line() -> None:
    s = spec(nodes=2, gpus_per_node=1, gpu_mode="real", real_gpu_count=1, shared_gpus=True, gpuless_nodes=("node2",))
    nodes = node_lines(config.render_slurm_conf(s))
    assert " Gres=gpu:1 " in nodes["node1"]
    assert "Gres=" not in nodes["node2"]
    assert "GresTypes=gpu" in config.render_slurm_conf(s).splitlines()
    assert [ln for ln in config.render_gres_conf(s).splitlines() if ln.startswith("NodeName=")] == [
        "NodeName=node1 Name=gpu File=/dev/nvidia0"
    ]
    fake = spec(nodes=2, gpus_per_node=4, gpuless_nodes=("node2",))
    assert "NodeName=node2" not in config.render_gres_conf(fake)
    assert (s.node_gpus("node1"), s.node_gpus("node2")) == (1, 0)


def test_hiding_gpus_on_a_node_the_cluster_lacks_is_refused() -> None:
    with pytest.raises(ValueError, match="gpuless_nodes: no node 'node3'"):
        spec(nodes=2, gpuless_nodes=("node3",))


def test_the_record_of_a_running_cluster_compares_equal_after_json() -> None:
    import json

    s = spec(nodes=2, gpus_per_node=1, shared_gpus=True, gpuless_nodes=("node2",))
    recorded = json.loads(json.dumps(_spec_json(s)))
    assert recorded == _spec_json(s)
    assert recorded["shared_gpus"] is True and recorded["gpuless_nodes"] == ["node2"]


def test_cli_takes_sharing_and_hidden_gpus() -> None:
    args = cli.build_parser().parse_args(["up", "--share-gpus", "--hide-gpus-on", "node2"])
    assert args.share_gpus is True and args.hide_gpus_on == ["node2"]
    plain = cli.build_parser().parse_args(["up"])
    assert plain.share_gpus is False and plain.hide_gpus_on == []

"""The profiles of the one-GPU H100 test machine, as thresholds.toml writes them: one node on its
GPU judged by the H100 set, and two simulated nodes sharing that GPU judged for the path only."""

from __future__ import annotations

from pathlib import Path

from gpucluster_testcluster import config as tc_config
from pytest_gpucluster.config import load

REPO_THRESHOLDS = Path(__file__).resolve().parents[2] / "thresholds.toml"
NO_NVLS = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}


def test_two_simulated_nodes_share_the_real_gpu_over_nccl_sockets_on_the_nodes_interface():
    config = load(REPO_THRESHOLDS)
    p = config.profile("testbox-2node")
    assert (p.executor, p.nodes, p.gpus_per_node, p.gpus_are_real) == ("slurm", 2, 1, True)
    assert p.device_cgroups and not p.accounting
    assert "one GPU shared by two simulated nodes" in p.description
    assert "not the speed" in p.description
    assert p.env["NCCL_SOCKET_IFNAME"] == tc_config.NODE_IFACE
    assert p.env["NCCL_IB_DISABLE"] == "1"
    assert NO_NVLS.items() <= dict(p.env).items()
    assert p.slurm_conf == str(tc_config.DEFAULT_STATE_DIR / "etc" / "slurm.conf")
    assert p.shared_fs == str(tc_config.DEFAULT_SHARED_DIR)
    # A node dropping off the network ends the across-node sweep well inside a fault run's bound.
    assert p.nccl.timeout_s <= 120
    assert p.nccl.max_bytes <= 2**30


def test_the_shared_gpu_set_has_floors_that_only_catch_a_zero():
    config = load(REPO_THRESHOLDS)
    t = config.thresholds_for(config.profile("testbox-2node"))
    assert t.name == "shared-gpu"
    for metric in (
        "nccl.all_reduce.inter_node",
        "nccl.all_gather.inter_node",
        "nccl.reduce_scatter.inter_node",
        "nccl.all_reduce.intra_node",
        "train.ddp.tokens_per_s_per_gpu",
        "train.fsdp.tokens_per_s_per_gpu",
        "compute.matmul_bf16",
        "compute.memcopy",
    ):
        floor = t[metric].fail_below
        assert floor is not None and 0 < floor <= 1, (metric, floor)
        assert t[metric].warn_below is None


def test_one_node_on_the_one_gpu_is_judged_by_the_h100_set():
    config = load(REPO_THRESHOLDS)
    p = config.profile("testbox-1gpu")
    assert (p.executor, p.nodes, p.gpus_per_node, p.gpus_are_real, p.device_cgroups) == ("slurm", 1, 1, True, True)
    assert dict(p.env) == NO_NVLS
    t = config.thresholds_for(p)
    assert t.name == "h100"
    assert t["compute.matmul_bf16"].fail_below == config.threshold_sets["h100"]["compute.matmul_bf16"].fail_below

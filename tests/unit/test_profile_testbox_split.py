"""The profiles of the 4×H200 test machine split into test-cluster nodes (2 × 2 GPUs, 4 × 1 GPU), as
thresholds.toml writes them: inside a node the H200 lines, across nodes lines that only prove the
socket path, and an across-node sweep short enough for sockets."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpucluster_testcluster import config as tc_config
from pytest_gpucluster.config import load
from pytest_gpucluster.config.profile import across_nodes
from pytest_gpucluster.plan.sizing import check_fits, gpu_memory_bytes

REPO_THRESHOLDS = Path(__file__).resolve().parents[2] / "thresholds.toml"
NO_NVLS = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
SHAPES = [("testbox-2x2", 2, 2), ("testbox-4x1", 4, 1)]


@pytest.mark.parametrize(("name", "nodes", "gpus"), SHAPES)
def test_the_split_machine_is_test_cluster_nodes_on_real_gpus_over_sockets(name, nodes, gpus):
    config = load(REPO_THRESHOLDS)
    p = config.profile(name)
    assert (p.executor, p.nodes, p.gpus_per_node, p.gpus_are_real, p.gpu_model) == (
        "slurm",
        nodes,
        gpus,
        True,
        "NVIDIA H200",
    )
    assert p.nodes * (p.gpus_per_node or 0) == 4  # the whole machine, each GPU on one node
    assert p.device_cgroups and not p.accounting and p.ib_hcas == 0
    assert p.slurm_conf == str(tc_config.DEFAULT_STATE_DIR / "etc" / "slurm.conf")
    assert p.shared_fs == str(tc_config.DEFAULT_SHARED_DIR)
    assert p.env["NCCL_SOCKET_IFNAME"] == tc_config.NODE_IFACE and p.env["NCCL_IB_DISABLE"] == "1"
    assert NO_NVLS.items() <= dict(p.env).items()
    assert "sockets" in p.description and "prove the path, not its speed" in p.description


@pytest.mark.parametrize(("name", "nodes", "gpus"), SHAPES)
def test_the_across_node_sweep_is_short_and_the_intra_node_one_is_the_testbox_ones(name, nodes, gpus):
    config = load(REPO_THRESHOLDS)
    p = config.profile(name)
    across = across_nodes(p)
    assert across.max_bytes <= 256 * 2**20 and across.timeout_s <= 120
    assert p.nccl == config.profile("testbox").nccl
    h200 = gpu_memory_bytes(p.gpu_model)
    assert h200 is not None
    check_fits(3 * p.nccl.max_bytes, h200, "intra-node sweep")


@pytest.mark.parametrize(("name", "nodes", "gpus"), SHAPES)
def test_inside_a_node_the_h200_lines_across_nodes_only_the_path(name, nodes, gpus):
    config = load(REPO_THRESHOLDS)
    t = config.thresholds_for(config.profile(name))
    h200 = config.threshold_sets["h200"]
    assert t.name == "h200-split"
    for metric in ("compute.matmul_bf16", "compute.memcopy", "train.ddp.mfu", "train.fsdp.mfu"):
        line, model = t[metric], h200[metric]
        assert (line.fail_below, line.warn_below, line.evidence) == (model.fail_below, model.warn_below, model.evidence)
        assert line.source.endswith(f"[thresholds.h200-split.{metric}] (inherited from [thresholds.{line.defined_in}])")
    if gpus == 2:
        # Two GPUs inside a node read lower than four (docs/nccl.md): lines of their own, well above sockets.
        assert t["nccl.all_reduce.intra_node"].fail_below == 295
        assert "nccl.all_reduce.intra_node" not in t.other_shapes
    else:
        # One GPU has no intra-node collective, and no line of another shape is in force for it.
        assert t.get("nccl.all_reduce.intra_node") is None and t.shape == "1 × NVIDIA H200"
    for op in ("all_reduce", "all_gather", "reduce_scatter", "alltoall", "broadcast"):
        floor = t[f"nccl.{op}.inter_node"].fail_below
        assert floor is not None and 0 < floor <= 0.1, (op, floor)
    for mode in ("ddp", "fsdp"):
        for metric in (f"train.{mode}.tokens_per_s_per_gpu", f"train.{mode}.scaling_efficiency"):
            assert t[metric].fail_below == 1 and "path only" in t[metric].evidence, metric
            assert t[metric].path_only and t[metric].origin == "path", metric

"""The network layer's check names the NIC and port behind a slow figure, and a node whose NCCL
found no RDMA device or went over sockets where the profile expects InfiniBand; on the NCCL logs
of tests/data/nccl_logs (captured on an H200, and written in NCCL 2.2x's format for IB and RoCE)."""

from __future__ import annotations

from pathlib import Path

from pytest_gpucluster.checks import nics
from pytest_gpucluster.checks.nccl import make_check
from pytest_gpucluster.config import NcclSettings, Threshold
from pytest_gpucluster.config.profile import Profile
from pytest_gpucluster.workloads.busbw import SizeResult, SweepResult
from pytest_gpucluster.workloads.nccl_log import GpuNics, nics_of, parse_nccl_log

LOGS = Path(__file__).parent.parent / "data" / "nccl_logs"
GiB = 2**30
LINE = Threshold("nccl.all_reduce.network_only", "GB/s", fail_below=150.0, warn_below=170.0, source="t.toml")
IB_PROFILE = Profile("ib8", gpus_per_node=8, gpu_model="NVIDIA H200", ib_hcas=8, gpus_are_real=True)


def _gpu(name: str, node: str, gpu: int) -> GpuNics:
    return nics_of(parse_nccl_log((LOGS / name).read_text()), node, gpu)


def _check(nodes: tuple[str, ...], busbw: float, gpus: tuple[GpuNics, ...], line: Threshold = LINE):
    row = SizeResult(size_bytes=GiB, count=GiB // 4, in_place=True, time_us=1.0, algbw=1.0, busbw=busbw, wrong=0)
    sweep = SweepResult(
        op="all_reduce",
        nodes=nodes,
        n_ranks=len(gpus),
        backend="nccl",
        implementation="all_reduce",
        rows=(row,),
        warmup_iters=5,
        iters=20,
        nics=gpus,
    )
    return make_check(sweep, line.metric, line, NcclSettings(judge_from_bytes=GiB))


def test_a_slow_node_names_every_nic_its_gpus_used_with_the_port_as_a_field():
    gpu = _gpu("ib_2.27.5_gpu-b_rank9_representative_sample.log", "gpu-b", 1)
    check = _check(("gpu-b",), 41.0, (gpu,))
    found = nics.of_check(check, IB_PROFILE, "the NICs alone")
    assert [(f.scope, f.nodes, f.port, f.severity, f.value) for f in found] == [
        ("port", ("gpu-b",), "mlx5_0/1", "fail", 41.0),
        ("port", ("gpu-b",), "mlx5_1/1", "fail", 41.0),
        ("port", ("gpu-b",), "mlx5_2/1", "fail", 41.0),
    ]
    assert found[0].text == "gpu-b: the NICs alone 41 GB/s busbw (fail < 150 GB/s): gpu1 via mlx5_0 port 1 (GDR on)"
    assert found[1].text.endswith("gpu1 via mlx5_1 port 1 (GDR on, some sends through another GPU's NIC, PXN)")
    assert found[2].text.endswith("gpu1 via mlx5_2 port 1 (GDR off)")
    assert found[0].convicts == ("gpu-b",)
    series = check.series["nics"]
    assert series[0]["node"] == "gpu-b" and series[0]["nics"][0]["name"] == "mlx5_0"


def test_gpus_sharing_a_nic_are_named_together_and_roce_says_so():
    base = _gpu("roce_2.21.5_gpu-c_rank0_representative_sample.log", "gpu-c", 0)
    gpus = tuple(GpuNics("gpu-c", g, base.network, base.nics) for g in range(4))
    found = nics.of_check(_check(("gpu-c",), 160.0, gpus), IB_PROFILE, "the NICs alone")
    assert [(f.port, f.severity) for f in found] == [("mlx5_0/1", "warn")]
    assert (
        found[0].text
        == "gpu-c: the NICs alone 160 GB/s busbw (warn < 170 GB/s): gpu0–3 via mlx5_0 port 1 (RoCE, GDR off)"
    )


def test_sockets_where_infiniband_is_expected_is_a_setting_of_each_node_not_a_speed_fail():
    gpus = (
        _gpu("h200_2.28.9_socket_rank0.log", "node1", 0),
        _gpu("h200_2.28.9_socket_rank1.log", "node2", 0),
    )
    found = nics.of_check(_check(("node1", "node2"), 1.86, gpus), IB_PROFILE, "the NICs alone across nodes")
    assert [(f.scope, f.nodes, f.setting, f.found) for f in found] == [
        ("node_setting", ("node1",), "NCCL network", "NCCL went over sockets"),
        ("node_setting", ("node2",), "NCCL network", "NCCL went over sockets"),
    ]
    assert found[0].expected == "InfiniBand through 8 HCAs ([profiles.ib8] ib_hcas = 8)"
    assert "ibv_devinfo" in found[0].remedy and found[0].text.startswith("node1: gpu0: NCCL went over sockets")


def test_no_rdma_device_is_named_from_the_log():
    gpu = _gpu("h200_2.28.9_ib_rank0.log", "node1", 0)
    [found] = nics.no_rdma([gpu], ib_hcas=8, link_layer="InfiniBand", profile="ib8")
    assert found.found == "no RDMA device (NCCL: NET/IB : No device found.)"
    assert found.convicts == ("node1",)


def test_without_infiniband_in_the_profile_sockets_are_only_named():
    gpus = (
        _gpu("h200_2.28.9_niconly_rank0.log", "node1", 0),
        _gpu("h200_2.28.9_niconly_rank1.log", "node2", 0),
    )
    profile = Profile("split", gpus_per_node=1, gpus_are_real=True)
    [found] = nics.of_check(_check(("node1", "node2"), 1.86, gpus), profile, "the NICs alone across nodes")
    assert (found.scope, found.nodes, found.culprits) == ("nodes", ("node1", "node2"), ())
    assert found.text == (
        "node1+node2: the NICs alone across nodes 1.86 GB/s busbw (fail < 150 GB/s): "
        "node1 gpu0 via lo (sockets); node2 gpu0 via lo (sockets)"
    )


def test_a_pass_or_a_sweep_without_nccls_log_adds_nothing():
    gpu = _gpu("ib_2.27.5_gpu-b_rank9_representative_sample.log", "gpu-b", 1)
    assert nics.of_check(_check(("gpu-b",), 400.0, (gpu,)), IB_PROFILE, "the NICs alone") == []
    assert nics.of_check(_check(("gpu-b",), 41.0, ()), IB_PROFILE, "the NICs alone") == []


def test_gpu_lists():
    assert nics.gpu_list([0, 1, 2, 3]) == "gpu0–3"
    assert nics.gpu_list([4, 0, 2]) == "gpu0, gpu2, gpu4"
    assert nics.gpu_list([0, 1, 4, 5, 6, 7]) == "gpu0–1, gpu4–7"


def test_a_node_the_straggler_check_convicts_is_named_with_its_nics():
    gpus = [
        _gpu("ib_2.27.5_gpu-b_rank9_representative_sample.log", "gpu-b", 1),
        _gpu("roce_2.21.5_gpu-c_rank0_representative_sample.log", "gpu-c", 0),
    ]
    found = nics.convicted(["gpu-c"], gpus, job_id="77")
    assert [(f.scope, f.nodes, f.port, f.job_id, f.convicts) for f in found] == [
        ("port", ("gpu-c",), "mlx5_0/1", "77", ("gpu-c",))
    ]
    assert found[0].text == "gpu-c: slow with every partner in send/recv: gpu0 via mlx5_0 port 1 (RoCE, GDR off)"
    assert nics.convicted(["gpu-a"], gpus) == []

"""Which NIC and port each GPU's network channels went through, read from NCCL's own INFO lines:
on logs captured on an H200 (sockets, the NICs-alone variant, IB with no RDMA device) and on
written logs in NCCL 2.2x's format for InfiniBand and RoCE (tests/data/README.md says which is
which)."""

from __future__ import annotations

from pathlib import Path

from pytest_gpucluster.workloads.nccl_log import NetChannel, NetDevice, nics_of, parse_from, parse_nccl_log

LOGS = Path(__file__).parent.parent / "data" / "nccl_logs"


def _log(name: str):
    return parse_nccl_log((LOGS / name).read_text())


def test_sockets_name_the_interface_and_its_channels():
    log = _log("h200_2.28.9_socket_rank0.log")
    assert log.network == "Socket"
    assert log.devices == (NetDevice("Socket", 0, "lo", address="127.0.0.1<0>", gdr=False),)
    assert {(c.direction, c.device, c.gdr, c.proxy) for c in log.channels} == {
        ("send", 0, False, None),
        ("receive", 0, False, None),
    }
    assert log.channels[0] == NetChannel(0, 0, 1, "receive", "Socket", 0, cuda_dev=0)
    gpu = nics_of(log, "node1", 0)
    assert (gpu.network, gpu.rdma_found) == ("Socket", None)
    [nic] = gpu.nics
    assert (nic.label, nic.link_layer, nic.directions, nic.gdr_state) == ("lo", "", ("send", "receive"), "off")


def test_the_nics_alone_variant_goes_through_the_same_device():
    for rank in (0, 1):
        gpu = nics_of(_log(f"h200_2.28.9_niconly_rank{rank}.log"), f"host{rank}", 0)
        assert [(n.net, n.name, n.directions) for n in gpu.nics] == [("Socket", "lo", ("send", "receive"))]


def test_no_rdma_device_is_said_and_no_nic_is_used():
    log = _log("h200_2.28.9_ib_rank0.log")
    assert (log.rdma_found, log.nets_failed, log.devices, log.channels) == (False, ("IB",), (), ())
    assert log.warnings and "Failed to initialize any NET plugin" in log.warnings[0]
    gpu = nics_of(log, "node1", 0)
    assert (gpu.nics, gpu.rdma_found, gpu.network) == ((), False, None)


def test_infiniband_names_each_hca_its_port_link_layer_and_gdr():
    log = _log("ib_2.27.5_gpu-b_rank9_representative_sample.log")
    assert [(d.index, d.label, d.link_layer, d.gdr) for d in log.devices] == [
        (0, "mlx5_0/1", "IB", True),
        (1, "mlx5_1/1", "IB", True),
        (2, "mlx5_2/1", "IB", False),
        (3, "mlx5_3/1", "IB", False),
    ]
    assert log.rdma_found is True
    pxn = next(c for c in log.channels if c.proxy is not None)
    assert (pxn.rank, pxn.peer, pxn.device, pxn.proxy, pxn.gdr, pxn.cuda_dev) == (9, 1, 1, 8, True, 1)
    gpu = nics_of(log, "gpu-b", 1)
    assert [(n.label, n.directions, n.gdr_state, n.proxied) for n in gpu.nics] == [
        ("mlx5_0/1", ("send", "receive"), "on", False),
        ("mlx5_1/1", ("send", "receive"), "on", True),
        ("mlx5_2/1", ("send", "receive"), "off", False),
    ]


def test_roce_without_gpudirect():
    gpu = nics_of(_log("roce_2.21.5_gpu-c_rank0_representative_sample.log"), "gpu-c", 0)
    [nic] = gpu.nics
    assert (nic.name, nic.port, nic.link_layer, nic.gdr_state) == ("mlx5_0", 1, "RoCE", "off")


def test_older_lines_and_a_process_of_several_gpus():
    # NCCL before 2.12 prints no connection index and a bus id in the brackets; nccl-tests -g 2
    # logs both GPUs' channels in one file, each under its thread's device.
    text = (
        "h:1:2 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1:2/IB ; OOB ib0:192.168.1.1<0>\n"
        "h:1:2 [0] NCCL INFO Channel 01 : 2[c7000] -> 0[87000] [receive] via NET/IB/0/GDRDMA\n"
        "h:1:3 [1] NCCL INFO Channel 01 : 1[8d000] -> 3[ca000] [send] via NET/IB/1\n"
    )
    log = parse_nccl_log(text)
    assert [d.label for d in log.devices] == ["mlx5_0/1", "mlx5_1/1"]
    assert [n.label for n in nics_of(log, "h", 0, cuda_dev=0).nics] == ["mlx5_0/1"]
    second = nics_of(log, "h", 1, cuda_dev=1).nics
    assert [(n.label, n.directions, n.gdr_state) for n in second] == [("mlx5_1/1", ("send",), "off")]


def test_receive_only_gpudirect_is_said():
    text = (
        "h:1:2 [0] NCCL INFO Channel 00/0 : 1[1] -> 0[0] [receive] via NET/IB/0/GDRDMA\n"
        "h:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] [send] via NET/IB/0\n"
    )
    [nic] = nics_of(parse_nccl_log(text), "h", 0).nics
    assert (nic.label, nic.gdr_state) == ("IB device 0", "on for receive only")  # no device list in this log


def test_a_later_communicator_keeps_the_devices_listed_at_the_start():
    data = (LOGS / "ib_2.27.5_gpu-b_rank9_representative_sample.log").read_bytes()
    start = data.index(b"gpu-b:5120:5190 [1] NCCL INFO comm 0x55d1")
    later = parse_from(data, start)
    assert len(later.devices) == 4 and later.rdma_found is True
    assert later.version is None  # said before this communicator started
    assert {c.device for c in later.channels} == {0, 1, 2}

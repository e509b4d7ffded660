"""What a sweep records about how NCCL ran it: the algorithm and protocol asked for, and the
network and transports NCCL's INFO lines name.

The log below is written in the format of NCCL 2.2x ``NCCL_DEBUG=INFO`` output with representative
values (two nodes of 8 GPUs, 8 NDR rails); it was not captured from a run.
"""

from __future__ import annotations

import dataclasses

from pytest_gpucluster.checks.nccl import make_check
from pytest_gpucluster.config import NcclSettings
from pytest_gpucluster.workloads import collectives
from pytest_gpucluster.workloads.busbw import SizeResult, SweepResult
from pytest_gpucluster.workloads.nccl_log import NcclLog, merge_logs, nccl_debug_file, parse_nccl_log, transport_of
from pytest_gpucluster.workloads.nccl_tests import NcclTestsRun

GiB = 2**30

LOG = """\
gpu-a:4021:4021 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.11<0>
gpu-a:4021:4021 [0] NCCL INFO NCCL version 2.27.5+cuda12.9
gpu-a:4021:4090 [0] NCCL INFO NCCL_ALGO set by environment to Ring
gpu-a:4021:4090 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB [2]mlx5_2:1/IB ; OOB eth0:10.0.0.11<0>
gpu-a:4021:4090 [0] NCCL INFO Using network IB
gpu-a:4021:4090 [0] NCCL INFO comm 0x5581 rank 0 nRanks 16 nNodes 2 localRanks 8 localRank 0 MNNVL 0
gpu-a:4021:4090 [0] NCCL INFO Channel 00/0 : 15[7] -> 0[0] [receive] via NET/IB/0/GDRDMA
gpu-a:4021:4090 [0] NCCL INFO Channel 08/0 : 0[0] -> 8[0] [send] via NET/IB/0(1)/GDRDMA
gpu-a:4021:4090 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read
gpu-a:4021:4090 [0] NCCL INFO Channel 01/0 : 0[0] -> 7[7] via P2P/CUMEM/read
gpu-a:4021:4090 [0] NCCL INFO Connected all rings
gpu-a:4021:4099 [0] NCCL WARN NET/IB : mlx5_3:1 port is not active
"""


def test_the_log_names_version_network_and_transports():
    log = parse_nccl_log(LOG)
    assert (log.version, log.network) == ("2.27.5", "IB")
    assert log.transports == ("NET/IB/GDRDMA", "P2P/CUMEM/read")  # network links first
    assert log.warnings == ("gpu-a:4021:4099 [0] NCCL WARN NET/IB : mlx5_3:1 port is not active",)


def test_transports_lose_their_device_numbers_only():
    assert transport_of("NET/IB/3(1)/GDRDMA") == "NET/IB/GDRDMA"
    assert transport_of("NET/Socket/0") == "NET/Socket"
    assert transport_of("SHM/direct/direct") == "SHM/direct/direct"
    assert parse_nccl_log("h:1:2 [0] NCCL INFO NVLS comm 0x55 headRank 0 nHeads 8 buffSize 4194304").transports == (
        "NVLS",
    )


def test_the_debug_file_is_expanded_as_nccl_expands_it():
    env = {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_FILE": "/jobs/nccl-inter-ab12.%h.%p.log"}
    assert nccl_debug_file(env, 4021, "gpu-a.cluster.local") == "/jobs/nccl-inter-ab12.gpu-a.4021.log"
    assert nccl_debug_file({**env, "NCCL_DEBUG": "WARN"}, 4021, "gpu-a") is None
    assert nccl_debug_file({"NCCL_DEBUG": "INFO"}, 4021, "gpu-a") is None


def test_every_ranks_log_counts(tmp_path):
    path = tmp_path / "nccl.log"
    path.write_text("h:1:1 [0] NCCL INFO old world line : 0[0] -> 1[1] via NET/Socket/0\n" + LOG)

    class OneRank:  # torch.distributed over a group of one, as far as _group_log needs it
        def get_world_size(self, group):
            return 1

        def all_gather_object(self, out, obj, group=None):
            out[0] = obj

    start = len(path.read_text().splitlines()[0]) + 1
    log, nics = collectives._group_log(OneRank(), None, str(path), start, "gpu-a", 0)
    assert [(n.name, n.port, n.directions) for n in nics[0].nics] == [("mlx5_0", 1, ("send", "receive"))]
    assert log.transports == ("NET/IB/GDRDMA", "P2P/CUMEM/read")  # lines before the group's start are not its own
    merged = merge_logs([NcclLog(None, None, ("P2P/CUMEM/read",)), NcclLog("2.27.5", "IB", ("NET/IB/GDRDMA",))])
    assert (merged.version, merged.network, merged.transports) == ("2.27.5", "IB", ("NET/IB/GDRDMA", "P2P/CUMEM/read"))


def _sweep(**facts) -> SweepResult:
    row = SizeResult(size_bytes=GiB, count=GiB // 4, in_place=False, time_us=1.0, algbw=1.0, busbw=372.0, wrong=0)
    return SweepResult(
        op="all_reduce",
        nodes=("gpu-a", "gpu-b"),
        n_ranks=16,
        backend="nccl",
        implementation="all_reduce",
        rows=(row,),
        warmup_iters=5,
        iters=20,
        nccl_version="2.27.5",
        **facts,
    )


def test_a_sweep_record_carries_algorithm_protocol_and_transports():
    sweep = _sweep(
        env={"NCCL_ALGO": "Ring"},
        nccl_algo="Ring",
        nccl_proto="Simple",
        transports=("NET/IB/GDRDMA", "P2P/CUMEM/read"),
        network="IB",
    )
    check = make_check(sweep, "nccl.all_reduce.inter_node", None, NcclSettings())
    s = check.series
    assert (s["nccl_algo"], s["nccl_proto"], s["network"], s["nccl_version"]) == ("Ring", "Simple", "IB", "2.27.5")
    assert s["transports"] == ["NET/IB/GDRDMA", "P2P/CUMEM/read"]
    assert check.measurement is not None
    assert check.measurement.detail.endswith(
        "16 ranks, nccl (NCCL_ALGO=Ring, NCCL_PROTO=Simple, via NET/IB/GDRDMA + P2P/CUMEM/read)"
    )


def test_an_unset_algorithm_is_nccls_choice_and_gloo_names_none():
    check = make_check(_sweep(), "nccl.all_reduce.intra_node", None, NcclSettings())
    assert check.series["nccl_algo"] is None
    assert check.measurement is not None and check.measurement.detail.endswith("nccl (algorithm NCCL's choice)")
    assert dataclasses.replace(_sweep(), backend="gloo").nccl_choice() == ""


def test_nccl_tests_sweeps_record_the_algorithm_they_ran_under():
    run = NcclTestsRun(
        op="all_reduce",
        rows=(),
        n_ranks=8,
        hosts=(),
        warmup_iters=5,
        iters=20,
        version="2.19.6",
        nccl_version="2.28.9",
        out_of_bounds=0,
        avg_busbw=None,
        errors=(),
    )
    sweep = run.to_sweep("gpu-a", "all_reduce", env={"NCCL_ALGO": "Tree", "NCCL_PROTO": "LL128"})
    assert (sweep.nccl_algo, sweep.nccl_proto) == ("Tree", "LL128")

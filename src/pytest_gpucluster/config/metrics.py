"""The metrics the suite can judge: name, unit and which direction is good.

thresholds.toml may only name metrics listed here, in the unit listed here; anything else is
rejected at load time, so a typo or a wrong unit can never make a check silently pass.

``calibrate`` says whether ``--gpucluster-calibrate`` may write a bound for the metric from measurements. Only
speeds are calibrated (bandwidths, FLOP/s, tokens/s, MFU, scaling): they are properties of the
cluster that a known-good run measures. Counts, capacities, free space, temperatures, teardown times,
spreads and ratios keep the bounds they have: those are sanity bounds (a count of errors must stay 0
however many clean runs read 0; free space is not a property of the cluster; a teardown that took
0.05 s says nothing about the 60 s a loaded cluster may take).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Direction = Literal["higher", "lower"]


@dataclass(frozen=True)
class Metric:
    """One judged quantity."""

    name: str
    unit: str
    better: Direction
    description: str
    calibrate: bool = False


def _m(name: str, unit: str, better: Direction, description: str, calibrate: bool = False) -> Metric:
    return Metric(name, unit, better, description, calibrate)


_COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "alltoall", "broadcast")
# The collectives NCCL can run on NVLink SHARP: only these have an NVLS-on scope.
NVLS_COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter")
_SCOPES = {
    "intra_node": "bus bandwidth inside one node (NVLink), ring/tree as NCCL chooses, NVLS off",
    "intra_node_nvls": "bus bandwidth inside one node with NVLink SHARP (NVLS) allowed",
    "inter_node": "bus bandwidth across all nodes, on [nccl] inter_node_algo (Ring unless set)",
}
# The fabric judged layer by layer (docs/nccl.md, "Layer by layer"): all_reduce with NCCL kept to one
# path, so a slow NVLink, NIC or cable shows by itself instead of inside a mixed figure.
LAYER_SCOPES = {
    "nvlink_only": "bus bandwidth inside one node on NVLink alone (NCCL_P2P_LEVEL=NVL, no NIC, no shared memory)",
    "network_only": "bus bandwidth inside one node with every GPU through its NIC (NCCL_P2P_DISABLE, NCCL_SHM_DISABLE)",
    "network_only_inter_node": "bus bandwidth across all nodes with every GPU through its NIC, even inside a node",
}

METRICS: dict[str, Metric] = {
    m.name: m
    for m in [
        # shared filesystem
        _m("sharedfs.capacity", "GiB", "higher", "size of the shared filesystem"),
        _m("sharedfs.free", "GiB", "higher", "free space on the shared filesystem"),
        # shared filesystem speed (checks/storage.py, docs/storage.md)
        _m("storage.write_per_node", "MB/s", "higher", "one node's large-block write, every node at once", True),
        _m("storage.read_per_node", "MB/s", "higher", "one node's read-back of its file, every node at once", True),
        _m("storage.write_aggregate", "MB/s", "higher", "the nodes' writes summed, every node at once", True),
        _m("storage.read_aggregate", "MB/s", "higher", "the nodes' read-backs summed, every node at once", True),
        _m("storage.fraction_of_node_median", "ratio", "higher", "a node's throughput over its peers' median"),
        _m("storage.metadata_ops", "ops/s", "higher", "creates, stats and unlinks of small files per node", True),
        _m(
            "storage.metadata_aggregate",
            "ops/s",
            "higher",
            "the nodes' creates, stats and unlinks per second summed, every node at once",
            True,
        ),
        _m("storage.visibility_round_trip", "s", "lower", "a file written on one node seen on another and back"),
        _m(
            "storage.renamed_visibility_round_trip",
            "s",
            "lower",
            "a file renamed into place on one node seen whole on another, and back",
        ),
        _m("storage.cold_import", "s", "lower", "a fresh interpreter's import of the framework on a node"),
        _m(
            "storage.write_per_gpu",
            "MB/s",
            "higher",
            "one stream's write, a stream per GPU on every node at once",
            True,
        ),
        _m(
            "storage.read_per_gpu",
            "MB/s",
            "higher",
            "one stream's read-back, a stream per GPU on every node at once",
            True,
        ),
        _m(
            "storage.large_dir_list",
            "s",
            "lower",
            "one directory of many files, written on one node, listed on another",
        ),
        _m("storage.checkpoint_save_per_gpu", "GB/s", "higher", "one GPU's shard of a DCP checkpoint written", True),
        _m("storage.checkpoint_restore_per_gpu", "GB/s", "higher", "one GPU's shard of a DCP checkpoint read", True),
        _m("storage.checkpoint_save_aggregate", "GB/s", "higher", "a whole DCP checkpoint saved by every GPU", True),
        _m("storage.checkpoint_restore_aggregate", "GB/s", "higher", "a whole DCP checkpoint restored", True),
        # GPU health (NVML)
        _m("gpu.temperature", "C", "lower", "GPU core temperature at rest"),
        _m("gpu.memory_temperature", "C", "lower", "HBM temperature at rest"),
        _m("gpu.ecc_volatile_uncorrectable", "count", "lower", "volatile uncorrectable ECC errors"),
        _m("gpu.retired_pages_pending", "count", "lower", "pages pending retirement"),
        _m("gpu.remapped_rows_pending", "count", "lower", "HBM row remaps pending a reset"),
        _m("gpu.remapped_rows_failed", "count", "lower", "HBM row remap failures"),
        _m("gpu.memory_used_at_rest", "MiB", "lower", "device memory in use before the job"),
        _m("gpu.hw_slowdown_share", "%", "lower", "share of the run a GPU spent in HW thermal slowdown or power brake"),
        _m("gpu.sw_thermal_share", "%", "lower", "share of the run the driver held a GPU's clocks down for heat"),
        # per-GPU compute
        _m("compute.matmul_bf16", "TFLOP/s", "higher", "large square bf16 GEMM on random data", calibrate=True),
        _m("compute.memcopy", "TB/s", "higher", "device-to-device copy, bytes read + written", calibrate=True),
        _m(
            "compute.fraction_of_node_median",
            "ratio",
            "higher",
            "a GPU's result divided by its node's median (catches one lagging GPU)",
        ),
        # training
        _m("train.ddp.tokens_per_s_per_gpu", "tokens/s", "higher", "DDP training throughput", calibrate=True),
        _m("train.fsdp.tokens_per_s_per_gpu", "tokens/s", "higher", "FSDP2 training throughput", calibrate=True),
        _m("train.ddp.mfu", "%", "higher", "DDP model FLOP utilisation against bf16 peak", calibrate=True),
        _m("train.fsdp.mfu", "%", "higher", "FSDP2 model FLOP utilisation against bf16 peak", calibrate=True),
        _m("train.ddp.scaling_efficiency", "%", "higher", "per-GPU throughput at scale / 1 GPU", calibrate=True),
        _m("train.fsdp.scaling_efficiency", "%", "higher", "per-GPU throughput at scale / 1 GPU", calibrate=True),
        _m("train.stability.step_time_cv", "%", "lower", "a node's step times: standard deviation / mean"),
        _m("train.stability.slowest_step_ratio", "ratio", "lower", "a node's slowest step / its median step"),
        # vendor tools where installed: nvbandwidth (copy engine) and perftest's ib_write_bw
        _m(
            "nvbandwidth.host_to_device",
            "GB/s",
            "higher",
            "nvbandwidth host_to_device_memcpy_ce: a GPU's copy from host memory",
            calibrate=True,
        ),
        _m(
            "nvbandwidth.device_to_host",
            "GB/s",
            "higher",
            "nvbandwidth device_to_host_memcpy_ce: a GPU's copy to host memory",
            calibrate=True,
        ),
        _m(
            "nvbandwidth.device_to_device",
            "GB/s",
            "higher",
            "nvbandwidth device_to_device_memcpy_read_ce: a GPU's worst pair with another GPU of its node",
            calibrate=True,
        ),
        _m("ib_write_bw.per_hca", "Gb/s", "higher", "ib_write_bw between two nodes over one HCA", calibrate=True),
        # inventory and telemetry
        _m("inventory.cpus_per_gpu", "count", "higher", "logical CPUs per GPU on each node"),
        _m("inventory.memory_per_gpu", "GiB", "higher", "host RAM per GPU on each node"),
        _m("inventory.memory_spread", "%", "lower", "host RAM difference from the nodes' median"),
        # the host (checks/host_checks.py): memory bandwidth per NUMA node, the clock
        _m(
            "host.memory_bandwidth",
            "GB/s",
            "higher",
            "STREAM's Add kernel on one NUMA node, a thread per CPU: bytes read and written",
            calibrate=True,
        ),
        _m(
            "host.memory_fraction_of_median", "ratio", "higher", "a NUMA node's memory bandwidth over its peers' median"
        ),
        _m("host.clock_offset", "ms", "lower", "a node's clock from the median of the tested nodes' clocks"),
        _m("telemetry.gpu_idle_fraction", "%", "lower", "time a GPU idled while its peers worked"),
        _m("robustness.rank_failure_teardown", "s", "lower", "time survivors took to stop"),
        # neighbour node pairs at once (the straggler check, checks/straggler.py)
        _m(
            "nccl.sendrecv.pair_latency",
            "ms",
            "lower",
            "a node pair's slowest rank: one send/recv exchange of a small message with its partner",
        ),
        _m(
            "nccl.sendrecv.pair_busbw",
            "GB/s",
            "higher",
            "a node pair's slowest rank: bytes per second each way in send/recv with its partner",
            calibrate=True,
        ),
        # results comparison
        _m("baseline.regression", "%", "lower", "drop against the baseline run"),
    ]
}

for _op in _COLLECTIVES:
    for _scope, _what in _SCOPES.items():
        if _scope == "intra_node_nvls" and _op not in NVLS_COLLECTIVES:
            continue
        _name = f"nccl.{_op}.{_scope}"
        METRICS[_name] = Metric(_name, "GB/s", "higher", f"{_op} {_what}", calibrate=True)
for _scope, _what in LAYER_SCOPES.items():
    _name = f"nccl.all_reduce.{_scope}"
    METRICS[_name] = Metric(_name, "GB/s", "higher", f"all_reduce {_what}", calibrate=True)


def known_metric_names() -> list[str]:
    """All metric names, sorted, for error messages and documentation."""
    return sorted(METRICS)

"""What the whole handover on the test cluster must say (``tests/acceptance -m "multinode and not
slow"`` with a short soak, on the ``ci`` profile or one extending it): run once, as an operator
inside a maintenance reservation (test_operators_ci.py), or as root where the operators cannot
run from this checkout (test_handover_ci.py). The clean case of each area's own integration test
(NCCL and the fabric's layers, storage, training) is asserted on this run rather than on a run of
its own; their fault cases stay in their files."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from faults_support import SHARED

HANDOVER = ("tests/acceptance", "-m", "multinode and not slow", "--gpucluster-soak=28s")


def assert_whole_handover(returncode: int, output: str, results: dict[str, Any], profile: str) -> None:
    """The handover ACCEPTED with every required check judged, every area the ``ci`` nodes can
    show judged, the soak after the one-shot checks on both nodes, and the checks with nothing to
    measure on the ``ci`` nodes not applicable with their reason, never passed."""
    acc, sel = results["acceptance"], results["selection"]
    assert returncode == 0, output[-8000:]
    assert acc["verdict"] == "ACCEPTED", acc
    assert sel["not_selected"] == [] and sel["markexpr"] == "multinode and not slow"
    # Every required check ran and passed, or found at run time that it does not apply (MFU of a
    # CPU run, dcgmi not installed).
    judged = {t["nodeid"] for t in results["tests"] if t["verdict"] in ("pass", "warn", "n/a")}
    assert set(sel["required"]) <= judged, set(sel["required"]) - judged
    areas = {t["area"] for t in results["tests"] if t["verdict"] in ("pass", "warn")}
    # Every area the ci profile can judge was judged, not only what needs two nodes.
    assert {
        "slurm_health",
        "sharedfs",
        "placement",
        "gpu_isolation",
        "inventory",
        "nccl",
        "training",
        "compute",
        "rank_failure",
        "telemetry",
        "sdc",
        "soak",
    } <= areas, areas
    # The soak ran after the one-shot checks, on both nodes, every cycle of every rank recorded.
    soak = results["soak"]
    assert soak["requested_s"] == 28 and soak["findings"] == [], soak["findings"]
    for node in ("node1", "node2"):
        kept = soak["nodes"][node]
        assert kept["ended"] == "duration" and kept["cycles"] >= 5, kept
        assert all(len(g["tflops"]) == kept["cycles"] and all(g["tflops"]) for g in kept["gpus"].values()), kept
    order = [t["area"] for t in results["tests"]]
    last = ("fabric", "xid", "gpu_slowdown")  # the checks of the jobs that run last
    assert order.index("soak") > max(i for i, a in enumerate(order) if a not in ("soak", *last))
    # No InfiniBand and no GPU on the ci nodes: the fabric check says so on each node, never passes.
    fabric = [t for t in results["tests"] if t["area"] == "fabric"]
    assert len(fabric) == 2 and all(t["verdict"] == "n/a" for t in fabric), fabric
    # The checks of the jobs that run last (fabric, Xid, the time slowed) come last; the Xid and
    # slowdown checks have no GPU device to read on the ci nodes: n/a on each, never a pass.
    assert {t["area"] for t in results["tests"][-6:]} == set(last), results["tests"][-6:]
    gres_only = f"profile '{profile}' has GRES-only GPUs (gpus_are_real = false); this check needs GPU devices"
    for area in ("xid", "gpu_slowdown"):
        tests = [t for t in results["tests"] if t["area"] == area]
        assert len(tests) == 2 and all(t["verdict"] == "n/a" for t in tests), tests
        assert all(t["message"].endswith(gres_only) for t in tests), tests
    reasons = set(sel["not_applicable"].values())
    assert f"profile '{profile}' expects no InfiniBand (ib_hcas = 0)" in reasons
    # ci has slurmdbd
    assert f"profile '{profile}' runs without Slurm accounting (accounting = false)" not in reasons
    assert_nccl_every_node_and_both_together(results)
    assert_storage_area(results)
    assert_training_on_and_across_both_nodes(results)


def tests_by_name(results: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Each test of the run by its name with parameters (``test_x[node1]``)."""
    return {t["nodeid"].rsplit("::", 1)[-1]: t for t in results["tests"]}


def outcome(results: dict[str, Any], name_part: str) -> str:
    """The outcome of the single test whose id contains ``name_part``."""
    found = [t for t in results["tests"] if name_part in t["nodeid"]]
    assert len(found) == 1, f"{name_part!r} matches {[t['nodeid'] for t in found]}"
    return str(found[0]["outcome"])


def assert_nccl_every_node_and_both_together(results: dict[str, Any]) -> None:
    """gloo over the two namespaced nodes, judged by the ci lines: every op inside each node and
    across both passes, all_to_all across nodes by default, one job for every node's sweep; the
    fabric layer by layer passes its path lines with each layer's NCCL settings kept."""
    for op in ("all_reduce", "all_gather", "reduce_scatter"):
        assert outcome(results, f"test_busbw_inside_node[{op}-node1]") == "passed"
        assert outcome(results, f"test_busbw_inside_node[{op}-node2]") == "passed"
        assert outcome(results, f"test_busbw_across_nodes[{op}]") == "passed"
    assert outcome(results, "test_busbw_across_nodes[alltoall]") == "passed"  # judged across nodes by default
    names = tests_by_name(results)
    assert "test_busbw_inside_node[alltoall-node1]" not in names  # not inside: [nccl] ops leaves it out
    intra = [t for t in results["tests"] if "inside_node" in t["nodeid"]]
    assert len({j for t in intra for j in t["job_ids"]}) == 1  # one job measured every node at once
    across = names["test_busbw_across_nodes[all_reduce]"]
    (series,) = across["series"]
    assert series["where"] == "node1+node2"
    assert series["env"]["NCCL_ALGO"] == "Ring"
    assert series["n_ranks"] == 4
    assert series["x_label"] == "bytes" and series["points"][-1][0] == 4 * 2**20
    (measurement,) = across["measurements"]
    assert measurement["unit"] == "GB/s" and measurement["value"] > 0
    for node in ("node1", "node2"):
        for name, setting in (
            ("test_busbw_on_nvlink_alone", {"NCCL_P2P_LEVEL": "NVL", "NCCL_SHM_DISABLE": "1", "NCCL_NET": "Socket"}),
            ("test_busbw_through_the_nics_alone", {"NCCL_P2P_DISABLE": "1", "NCCL_SHM_DISABLE": "1"}),
        ):
            test = names[f"{name}[{node}]"]
            assert test["outcome"] == "passed", test
            (series,) = test["series"]
            assert series["where"] == node and setting.items() <= series["env"].items()
            (m,) = test["measurements"]
            assert m["status"] == "pass" and m["threshold"]["origin"] == "path" and m["value"] > 0
    network = names["test_busbw_through_the_nics_alone_across_nodes"]
    assert network["outcome"] == "passed"
    (series,) = network["series"]
    assert series["where"] == "node1+node2" and series["env"]["NCCL_P2P_DISABLE"] == "1"
    assert series["env"]["NCCL_ALGO"] == "Ring"
    nics = [t for t in results["tests"] if "through_the_nics_alone" in t["nodeid"]]
    assert len({j for t in nics for j in t["job_ids"]}) == 1
    pairs = names["test_no_straggler_among_neighbour_pairs"]
    assert pairs["outcome"] == "passed", pairs
    assert pairs["job_ids"] == names["test_busbw_across_nodes[all_reduce]"]["job_ids"]
    statuses = {(m["metric"], m["where"], m["status"]) for m in pairs["measurements"]}
    assert statuses == {
        ("nccl.sendrecv.pair_latency", "node1+node2", "pass"),
        ("nccl.sendrecv.pair_busbw", "node1+node2", "pass"),
    }
    assert pairs["pairs"] == {"rounds": [["node1+node2"]], "slow_nodes": []}  # two nodes: one pair


STORAGE = (
    "test_checkpoint_restores_bit_for_bit",
    "test_checkpoint_save_and_restore_rates",
    "test_cold_import_of_the_framework",
    "test_large_directory_listed_from_another_node",
    "test_lock_held_on_one_node_keeps_the_others_out",
    "test_metadata_rate",
    "test_mounted_alike_on_every_node",
    "test_renamed_file_seen_whole_on_another_node_soon",
    "test_write_and_read_throughput",
    "test_write_seen_on_another_node_soon",
)


def assert_storage_area(results: dict[str, Any]) -> None:
    """Every storage check passes on the shared directory with the ci sizes, the checkpoint from a
    CPU rank per node among them, and the jobs' directories are removed."""
    tests = {n: t for n, t in tests_by_name(results).items() if t["area"] == "storage"}
    assert sorted(tests) == list(STORAGE), sorted(tests)
    assert all(t["verdict"] in ("pass", "warn") for t in tests.values()), tests
    nodes = tests["test_write_and_read_throughput"]["storage"]["nodes"]
    assert sorted(nodes) == ["node1", "node2"]
    for facts in nodes.values():
        assert facts["mode"] == "O_DIRECT" and facts["bytes"] == 2 * 128 * 2**20 and facts["streams"] == 2
        assert facts["tool"] in ("fio", "python") and len(facts["write_mb_s_per_stream"]) == 2
        assert len(facts["round_trips_ms"]) == 5 and facts["import_s"] > 0
        assert len(facts["renamed_round_trips_ms"]) == 5 and facts["renamed_short"] == 0
    locks = tests["test_lock_held_on_one_node_keeps_the_others_out"]["storage"]["locks"]
    assert locks["node2"] == {"lockf": "kept out, then took it", "flock": "kept out, then took it"}, locks
    metadata = {m["metric"] for m in tests["test_metadata_rate"]["measurements"]}
    assert "storage.metadata_aggregate" in metadata, metadata
    assert nodes["node1"]["large_dir_files"] == 2000 and nodes["node2"]["large_dir_listed"] == 2000
    checkpoint = tests["test_checkpoint_restores_bit_for_bit"]["storage"]["checkpoint"]
    assert checkpoint["bit_for_bit"] and sorted(checkpoint["ranks"]) == ["node1:cpu0", "node2:cpu0"], checkpoint
    assert all(r["save_bytes"] > 0 and r["restore_gb_s"] > 0 for r in checkpoint["ranks"].values())
    assert checkpoint["save"]["slowest"] in checkpoint["ranks"] and checkpoint["save"]["gb_s"] > 0
    rates = tests["test_checkpoint_save_and_restore_rates"]
    assert {m["metric"] for m in rates["measurements"]} >= {
        "storage.checkpoint_save_per_gpu",
        "storage.checkpoint_restore_aggregate",
    }, rates
    assert not any(Path(SHARED).rglob("storage-*")), "the jobs' directories are removed"


def assert_training_on_and_across_both_nodes(results: dict[str, Any]) -> None:
    """The tiny model trains under DDP and FSDP2 over gloo on each node and across both, replicas
    agree, each node's training job is watched by the telemetry sampler."""
    for name in (
        "test_training_one_gpu",
        "across_nodes[ddp]",
        "across_nodes[fsdp]",
        "test_training_on_node[node1-ddp]",
        "test_training_on_node[node2-fsdp]",
        "agree[node1]",
        "agree[node2]",
    ):
        assert outcome(results, name) == "passed", name
    assert outcome(results, "mfu_on_node[node1-ddp]") == "skipped"
    names = tests_by_name(results)
    across = names["test_training_across_nodes[ddp]"]
    metrics = {m["metric"]: m for m in across["measurements"]}
    efficiency = metrics["train.ddp.scaling_efficiency"]
    assert (efficiency["where"], efficiency["nodes"], efficiency["culprits"]) == ("node1+node2", ["node1", "node2"], [])
    assert metrics["train.ddp.tokens_per_s_per_gpu"]["value"] > 0
    assert metrics["train.ddp.tokens_per_s_per_gpu"]["detail"] == "2 nodes × 2 × cpu, fp32"  # ci sets its own sizes
    losses = next(s for s in across["series"] if s["name"] == "train.ddp.loss")["points"]
    assert losses[-1][1] < losses[0][1]
    # the across-nodes job and both per-node jobs, whose GPUs trained alone first (the baseline)
    assert len(across["job_ids"]) == 3
    # Each node's training job was watched by the telemetry sampler (node CPU and memory on CPU nodes).
    for node in ("node1", "node2"):
        watched = names[f"test_node_was_watched_while_training[{node}]"]
        assert watched["outcome"] == "passed", watched["message"]
        series = {s["name"]: s for s in watched["series"]}
        assert {"telemetry.training.cpu_util", "telemetry.training.mem_used_pct"} <= set(series)
        assert len(series["telemetry.training.cpu_util"]["points"]) >= 2
        assert all(s["where"] == node for s in watched["series"])
    assert outcome(results, "idles_while_its_peers_train[node1]") == "skipped"  # GRES-only GPUs

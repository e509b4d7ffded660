"""Training and per-GPU compute against the real Slurm test cluster: the tiny model trains under
DDP and FSDP2 over gloo on each namespaced node and across both, replicas stay bit-identical, and
the compute probe names every CPU rank standing in for a GPU."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.integration


def test_tiny_model_trains_with_ddp_and_fsdp_on_and_across_both_nodes(run_acceptance):
    run = run_acceptance("tests/acceptance/test_training.py", timeout_s=300)
    assert run.returncode == 0, run.output
    for name in (
        "test_training_one_gpu",
        "across_nodes[ddp]",
        "across_nodes[fsdp]",
        "test_training_on_node[node1-ddp]",
        "test_training_on_node[node2-fsdp]",
        "agree[node1]",
        "agree[node2]",
    ):
        assert run.outcome(name) == "passed", name
    assert run.outcome("mfu_on_node[node1-ddp]") == "skipped"
    across = next(t for t in run.results["tests"] if "across_nodes[ddp]" in t["nodeid"])
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
        watched = next(t for t in run.results["tests"] if f"watched_while_training[{node}]" in t["nodeid"])
        assert watched["outcome"] == "passed", watched["message"]
        names = {s["name"]: s for s in watched["series"]}
        assert {"telemetry.training.cpu_util", "telemetry.training.mem_used_pct"} <= set(names)
        assert len(names["telemetry.training.cpu_util"]["points"]) >= 2
        assert all(s["where"] == node for s in watched["series"])
    assert run.outcome("idles_while_its_peers_train[node1]") == "skipped"  # GRES-only GPUs


def test_compute_probe_names_each_rank_of_each_node(run_acceptance):
    run = run_acceptance("tests/acceptance/test_compute.py", timeout_s=180)
    assert run.returncode == 0, run.output
    assert run.outcome("compute_and_memory[node1]") == "passed"
    assert run.outcome("burn_without_throttling[node1]") == "skipped"  # GRES-only GPUs: no NVML
    node2 = next(t for t in run.results["tests"] if "compute_and_memory[node2]" in t["nodeid"])
    wheres = {m["where"] for m in node2["measurements"]}
    assert wheres == {"node2:cpu0", "node2:cpu1"}

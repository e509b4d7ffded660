"""Per-GPU compute against the real Slurm test cluster: the compute probe names every CPU rank
standing in for a GPU. Training (the tiny model under DDP and FSDP2 over gloo on each namespaced
node and across both, replicas bit-identical) is asserted on the whole handover
(handover_support.py)."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.integration


def test_compute_probe_names_each_rank_of_each_node(run_acceptance):
    run = run_acceptance("tests/acceptance/test_compute.py", timeout_s=180)
    assert run.returncode == 0, run.output
    assert run.outcome("compute_and_memory[node1]") == "passed"
    assert run.outcome("burn_without_throttling[node1]") == "skipped"  # GRES-only GPUs: no NVML
    node2 = next(t for t in run.results["tests"] if "compute_and_memory[node2]" in t["nodeid"])
    wheres = {m["where"] for m in node2["measurements"]}
    assert wheres == {"node2:cpu0", "node2:cpu1"}

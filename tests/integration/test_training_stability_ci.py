"""Training stability on the real Slurm test cluster: the long run trains on CPU ranks on each
namespaced node (ci profile sizes, ``stability_steps`` of them); its loss falls and each node's
step times are judged."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.integration


def test_long_run_on_each_node_is_stable(run_acceptance):
    run = run_acceptance("tests/acceptance/test_training_stability.py", "-m", "slow", timeout_s=300)
    assert run.returncode == 0, run.output
    for node in ("node1", "node2"):
        assert run.outcome(f"test_loss_falls_and_stays_finite_over_a_long_run[{node}]") == "passed", node
        steady = next(t for t in run.results["tests"] if f"steady_over_a_long_run[{node}]" in t["nodeid"])
        assert steady["outcome"] == "passed", steady["message"]
        metrics = {m["metric"]: m for m in steady["measurements"]}
        assert set(metrics) == {"train.stability.step_time_cv", "train.stability.slowest_step_ratio"}
        assert metrics["train.stability.step_time_cv"]["where"] == node
        assert metrics["train.stability.slowest_step_ratio"]["detail"].startswith("120 steps, median ")
    # one job per node, both submitted at once
    assert len({j for t in run.results["tests"] for j in t["job_ids"]}) == 2

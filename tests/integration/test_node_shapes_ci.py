"""Node shapes against the real Slurm test cluster: the acceptance checks whose plan depends on the
GPUs per node, run with a profile of 1 GRES GPU per node (two nodes) and of 8 (one node) on a
cluster whose nodes offer exactly that. Nothing fails or errors; at 1 GPU the intra-node
collective does not apply and training judges no scaling inside a node; the rank failure is
measured at both."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from gpucluster_testcluster import ClusterInfo, TestCluster

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
# The checks whose jobs or applicability follow the node's GPU count.
SHAPED = [
    "tests/acceptance/test_nccl.py",
    "tests/acceptance/test_telemetry.py",
    "tests/acceptance/test_compute.py",
    "tests/acceptance/test_rank_failure.py",
    "tests/acceptance/test_training.py",
    "tests/acceptance/test_gpu_isolation.py",
    "tests/acceptance/test_slurm_health.py",
]


@pytest.fixture
def gres_per_node(slurm_cluster: ClusterInfo) -> Iterator[Callable[[int], None]]:
    """``gres_per_node(G)`` brings the test cluster up again with G GRES GPUs on each node (the
    ci profile's health check wants the count the profile states); the cluster's own shape is
    brought back afterwards, for the tests that follow."""
    nodes, accounting = len(slurm_cluster.nodes), slurm_cluster.accounting

    def reshape(gpus: int) -> None:
        TestCluster(nodes=nodes, gpus_per_node=gpus, accounting=accounting, install=False).up()

    try:
        yield reshape
    finally:
        reshape(slurm_cluster.gpus_per_node)


def _profile(tmp_path: Path, gpus: int, nodes: int) -> Path:
    path = tmp_path / f"shape{gpus}.toml"
    path.write_text(
        (REPO / "thresholds.toml").read_text()
        + f'\n[profiles.shape{gpus}]\nextends = "ci"\ngpus_per_node = {gpus}\nnodes = {nodes}\n'
    )
    return path


def _by_name(results: dict, part: str) -> list[dict]:
    return [t for t in results["tests"] if part in t["nodeid"]]


def _metrics(tests: list[dict]) -> set[str]:
    return {m["metric"] for t in tests for m in t["measurements"]}


def test_one_and_eight_gpus_per_node_are_judged_without_false_fails(run_acceptance, gres_per_node, tmp_path):
    runs = {}
    for gpus in (1, 8):
        gres_per_node(gpus)
        # At 8 GPUs the isolation pair runs 1 + 4 tasks per node at once: more than the 4 CPUs of a
        # test-cluster node, so its second job would only queue. Its shapes run at 1 GPU and in ci.
        files = SHAPED if gpus < 8 else [f for f in SHAPED if "gpu_isolation" not in f]
        # At 8 GPUs one node: what the count changes is inside a node (the sweeps of 8 ranks,
        # scaling over a node's GPUs); across nodes the plan is the one at 1 GPU and in ci, and
        # 16 CPU ranks on the 2 cores of a CI machine would only add minutes.
        runs[gpus] = run = run_acceptance(
            *files,
            f"--gpucluster-thresholds={_profile(tmp_path, gpus, nodes=2 if gpus < 8 else 1)}",
            f"--cluster=shape{gpus}",
            "-m",
            "not slow",
            timeout_s=420,
        )
        bad = [(t["nodeid"], t["message"][:300]) for t in run.results["tests"] if t["verdict"] == "fail"]
        assert not bad and run.returncode == 0, (gpus, bad, run.output[-3000:])
        assert run.outcome("test_a_dead_rank_ends_the_job") == "passed", gpus
        (dead,) = _by_name(run.results, "test_a_dead_rank_ends_the_job")
        assert dead["measurements"][0]["metric"] == "robustness.rank_failure_teardown"

    one, eight = runs[1].results, runs[8].results
    intra = _by_name(one, "test_busbw_inside_node")
    assert intra and {t["verdict"] for t in intra} == {"n/a"}
    assert all(t["message"].endswith("node has 1 GPU: no intra-node collective") for t in intra)
    assert {t["verdict"] for t in _by_name(one, "test_telemetry.py")} == {"n/a"}
    assert {t["verdict"] for t in _by_name(eight, "test_busbw_inside_node")} == {"pass"}
    # Scaling inside a node is judged only where the node has more than one GPU.
    assert "train.ddp.scaling_efficiency" not in _metrics(_by_name(one, "test_training_on_node"))
    assert "train.ddp.tokens_per_s_per_gpu" in _metrics(_by_name(one, "test_training_on_node"))
    assert "train.ddp.scaling_efficiency" in _metrics(_by_name(eight, "test_training_on_node"))
    assert "train.ddp.scaling_efficiency" in _metrics(_by_name(one, "test_training_across_nodes"))  # 2 GPUs

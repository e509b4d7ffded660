"""The across-node sweep runs the sizes and repetitions of ``[nccl_across]`` on the real Slurm
test cluster while the intra-node sweep keeps ``[nccl]``'s."""

from __future__ import annotations

from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]

ACROSS = """
[profiles.ci-across]
extends = "ci"
[profiles.ci-across.nccl_across]
min_bytes = "128KiB"
max_bytes = "1MiB"
judge_from_bytes = "256KiB"
iters = 3
"""


def test_the_across_node_sweep_has_sizes_of_its_own(run_acceptance, tmp_path):
    path = tmp_path / "thresholds.toml"
    path.write_text((REPO / "thresholds.toml").read_text() + ACROSS)
    run = run_acceptance(
        "tests/acceptance/test_nccl.py", "--cluster=ci-across", f"--gpucluster-thresholds={path}", "-k", "all_reduce"
    )
    assert run.returncode == 0, run.output
    by_id = {t["nodeid"].rsplit("::", 1)[-1]: t for t in run.results["tests"]}
    (across,) = by_id["test_busbw_across_nodes[all_reduce]"]["series"]
    assert across["points"][0][0] == 128 * 2**10 and across["points"][-1][0] == 2**20
    assert across["iters"] == 3
    (measured,) = by_id["test_busbw_across_nodes[all_reduce]"]["measurements"]
    assert "min busbw over sizes ≥ 256 KiB" in measured["detail"]
    # The ci profile's [nccl]: 64 KiB to 4 MiB, 5 iterations, judged from 1 MiB.
    (inside,) = by_id["test_busbw_inside_node[all_reduce-node1]"]["series"]
    assert inside["points"][0][0] == 64 * 2**10 and inside["points"][-1][0] == 4 * 2**20
    assert inside["iters"] == 5

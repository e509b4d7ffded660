"""The fabric counter check through Slurm on node3/node4: both nodes read a recorded InfiniBand
sysfs tree on the shared filesystem (the profile's ``fabric_sysfs_root``), one counter moves
between the snapshot started ahead and the one taken after the last job (as a link taking symbol
errors under traffic would make it), and each node's check fails naming the node, HCA, port,
counter and the values before and after."""

from __future__ import annotations

import shutil
import uuid
from pathlib import Path

import pytest
from faults_support import REPO, SHARED, fault_profile, run_pytest

pytestmark = pytest.mark.integration

RECORDED = REPO / "tests" / "data" / "fabric" / "before"
TRAFFIC = """
from pathlib import Path


def test_traffic(gpucluster):
    assert not gpucluster.runner.await_ahead()
    Path({path!r}).write_text("37\\n")
"""


def test_a_counter_that_rose_between_the_snapshots_fails_on_each_node_naming_the_port(slurm_cluster, tmp_path):
    root = Path(SHARED) / f"fabric-{uuid.uuid4().hex[:8]}"
    shutil.copytree(RECORDED, root)
    profile = fault_profile(tmp_path, fabric_sysfs_root=str(root), queue_timeout_s=30)
    try:
        traffic = tmp_path / "test_zz_traffic.py"
        traffic.write_text(TRAFFIC.format(path=str(root / "mlx5_2" / "ports" / "1" / "counters" / "symbol_error")))
        run = run_pytest(profile, tmp_path, "tests/acceptance/test_fabric.py", str(traffic), timeout=300)
    finally:
        profile.cancel_all()
        shutil.rmtree(root, ignore_errors=True)
    fabric = [t for t in run.results["tests"] if "fabric_error_counters" in t["nodeid"]]
    assert sorted(t["params"] for t in fabric) == ["node3", "node4"], run.output[-3000:]
    for t in fabric:
        assert t["verdict"] == "fail", t
        assert f"{t['params']}:mlx5_2 port 1: symbol_error rose 0 → 37 (+37, at most +0 allowed)" in t["message"], t
    assert run.results["acceptance"]["verdict"] == "REJECTED"
    assert run.results["acceptance"]["nodes"]["exclude"] == "node[3-4]"

"""The fabric counter check through Slurm on node3/node4: both nodes read a recorded InfiniBand
sysfs tree on the shared filesystem (the profile's ``fabric_sysfs_root``), a fatal counter moves
between the snapshot started ahead and the one taken after the last job (as a link that went down
and came back under traffic would make it), and each node's check fails naming the node, HCA,
port and counter in its first sentence, with the values before and after in the results. The
snapshot jobs hold the nodes' GPUs (GRES here); the profile's GPUs are not real, so NVLink is
said not read, a warning."""

from __future__ import annotations

import re
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
    Path({path!r}).write_text("1\\n")
"""


def test_a_counter_that_rose_between_the_snapshots_fails_on_each_node_naming_the_port(slurm_cluster, tmp_path):
    root = Path(SHARED) / f"fabric-{uuid.uuid4().hex[:8]}"
    shutil.copytree(RECORDED, root)
    profile = fault_profile(tmp_path, fabric_sysfs_root=str(root), queue_timeout_s=30)
    try:
        traffic = tmp_path / "test_zz_traffic.py"
        traffic.write_text(TRAFFIC.format(path=str(root / "mlx5_2" / "ports" / "1" / "counters" / "link_downed")))
        run = run_pytest(profile, tmp_path, "tests/acceptance/test_fabric.py", str(traffic), timeout=300)
    finally:
        profile.cancel_all()
        shutil.rmtree(root, ignore_errors=True)
    fabric = [t for t in run.results["tests"] if "fabric_error_counters" in t["nodeid"]]
    assert sorted(t["params"] for t in fabric) == ["node3", "node4"], run.output[-3000:]
    for t in fabric:
        assert t["verdict"] == "fail", t
        first = rf"Failed: {t['params']}: InfiniBand link_downed \+1 on mlx5_2 port 1 over \d+ s \(fail > 0\)"
        assert re.match(first, t["message"]), t
        (detail,) = [f["detail"] for f in t["fabric"]["findings"] if f["subject"] == "link_downed"]
        assert detail == [{"where": "mlx5_2 port 1", "counter": "link_downed", "before": 0, "after": 1}], t
        assert any("NVLink error counters not read (not asked for" in w for w in t["warnings"]), t
    assert run.results["acceptance"]["verdict"] == "REJECTED"
    assert run.results["acceptance"]["nodes"]["exclude"] == "node[3-4]"

"""`down` leaves the machine as it found it, and `up` works again afterwards.

Slow-ish (a full teardown and bring-up); it restores the cluster it found, so
the session's other tests keep working.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from pytest_gpucluster.testcluster import ClusterInfo, TestCluster
from pytest_gpucluster.testcluster import config as tc_config

pytestmark = pytest.mark.integration


def processes_mentioning(needle: str) -> list[str]:
    """Live processes whose command line or environment names ``needle``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if (entry / "stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
                continue
            blob = (entry / "cmdline").read_bytes() + (entry / "environ").read_bytes()
        except OSError:
            continue
        if needle.encode() in blob:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            found.append(f"{entry.name}: {cmdline[:120]}")
    return found


def test_down_cleans_up_and_up_restores(slurm_cluster: ClusterInfo) -> None:
    running = TestCluster.from_running(slurm_cluster.state_dir)
    assert running is not None
    state_dir = slurm_cluster.state_dir

    t0 = time.monotonic()
    running.down()
    down_s = time.monotonic() - t0

    assert processes_mentioning(str(state_dir)) == []
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, timeout=10, check=True).stdout
    for node in slurm_cluster.nodes:
        assert node not in netns.split()
        assert not Path("/sys/class/net", tc_config.veth_name(node)).exists()
    assert not Path("/sys/class/net", tc_config.BRIDGE).exists()
    assert "gpucluster-testcluster" not in Path("/etc/hosts").read_text()
    assert not state_dir.exists()
    assert not running.is_up()

    # Repeating down is harmless.
    running.down()

    t0 = time.monotonic()
    info = running.up()
    up_s = time.monotonic() - t0
    assert running.is_up()
    out = subprocess.run(
        ["srun", "-N2", "hostname"], env=info.env(), capture_output=True, text=True, timeout=60, check=True
    ).stdout
    assert set(out.split()) == set(slurm_cluster.nodes[:2])
    print(f"down {down_s:.1f}s, up {up_s:.1f}s")

"""The storage area through Slurm (its clean case, every check passing with the checkpoint from a
CPU rank per node, is asserted on the whole handover: handover_support.py): with node4's disk
throttled (a blkio cgroup around its slurmd, which its job steps inherit), node4 is
rejected by name with its mount and node3 is not; with both nodes throttled under a line, the
shared filesystem is named and no node is excluded."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from faults_support import SHARED, fault_profile, remove_cgroup, run_pytest

from gpucluster_testcluster import ClusterInfo
from gpucluster_testcluster.config import Paths
from gpucluster_testcluster.proc import alive_from_pid_file

pytestmark = pytest.mark.integration

AREA = "tests/acceptance/test_storage.py"
BLKIO = Path("/sys/fs/cgroup/blkio")
THROTTLE_BPS = 8 * 10**6


@contextmanager
def throttled(info: ClusterInfo, *nodes: str, bps: int = THROTTLE_BPS) -> Iterator[None]:
    """The slurmd of each of ``nodes`` (and so every job step it starts) in a blkio cgroup that
    throttles direct reads and writes to the shared directory's disk; back in the root group
    afterwards."""
    dev = os.stat(SHARED).st_dev
    if os.major(dev) == 0 or not (BLKIO / "blkio.throttle.write_bps_device").exists():
        pytest.skip(f"{SHARED} is on no block device blkio can throttle here")
    paths = Paths(state_dir=info.state_dir, shared_dir=info.shared_dir)
    pids = [alive_from_pid_file(paths.slurmd_pid(n), "slurmd") for n in nodes]
    assert None not in pids, f"the slurmd of {nodes} is not running: {pids}"
    group = BLKIO / f"gpucluster-storage-ci-{os.getpid()}"
    group.mkdir()
    try:
        for what in ("write", "read"):
            (group / f"blkio.throttle.{what}_bps_device").write_text(f"{os.major(dev)}:{os.minor(dev)} {bps}\n")
        for pid in pids:
            (group / "cgroup.procs").write_text(f"{pid}\n")
        yield
    finally:
        for pid in pids:
            (BLKIO / "cgroup.procs").write_text(f"{pid}\n")
        remove_cgroup(group)


STORAGE = """
[profiles.faults.storage]
file_bytes = "32MiB"
block_bytes = "4MiB"
streams_per_node = 1
metadata_files = 200
large_dir_files = 0
visibility_tries = 3
import_module = ""
"""


def test_a_node_with_a_throttled_disk_is_rejected_naming_it_and_its_mount(slurm_cluster, tmp_path):
    profile = fault_profile(tmp_path, extra_text=STORAGE, queue_timeout_s=30)
    try:
        with throttled(slurm_cluster, "node4"):
            run = run_pytest(profile, tmp_path, AREA, "-k", "throughput", timeout=300)
    finally:
        profile.cancel_all()
    (test,) = [t for t in run.results["tests"] if "throughput" in t["nodeid"]]
    assert test["verdict"] == "fail", run.output[-3000:]
    failed = [f for f in test["findings"] if f["severity"] == "fail"]
    assert failed and all(f["culprits"] == ["node4"] for f in failed), failed
    mount = test["storage"]["nodes"]["node4"]["mount"]
    assert any(f["text"].startswith("node4: writes ") and f" on {mount}, " in f["text"] for f in failed), failed
    nodes = run.results["acceptance"]["nodes"]
    assert run.results["acceptance"]["verdict"] == "REJECTED"
    assert nodes["exclude"] == "node4", nodes
    print(f"throttled node4: {run.seconds:.1f} s; {failed[0]['text']}")


LINE = """
[thresholds.storage-line]
extends = "cpu"
"storage.write_per_node" = { unit = "MB/s", fail_below = 50, source = "a line above the throttle" }
"""


def test_every_node_throttled_is_the_shared_filesystems_finding_and_no_node_is_excluded(slurm_cluster, tmp_path):
    profile = fault_profile(tmp_path, extra_text=STORAGE + LINE, queue_timeout_s=30, thresholds="storage-line")
    try:
        # The two nodes share one group's rate: 16 MB/s keeps each well under the 50 MB/s line and
        # the job well inside its time limit (at 8 MB/s it ran out of it once on a slow machine).
        with throttled(slurm_cluster, "node3", "node4", bps=2 * THROTTLE_BPS):
            run = run_pytest(profile, tmp_path, AREA, "-k", "throughput", timeout=300)
    finally:
        profile.cancel_all()
    (test,) = [t for t in run.results["tests"] if "throughput" in t["nodeid"]]
    assert test["verdict"] == "fail", run.output[-3000:]
    failed = [f for f in test["findings"] if f["severity"] == "fail"]
    assert [f["scope"] for f in failed] == ["shared_fs"] and failed[0]["culprits"] == [], failed
    assert (
        failed[0]["text"].startswith("the shared filesystem (")
        and "every node writes past the line alike" in failed[0]["text"]
    )
    assert run.results["acceptance"]["verdict"] == "REJECTED"
    assert not run.results["acceptance"]["nodes"].get("exclude"), run.results["acceptance"]["nodes"]
    print(f"every node throttled: {run.seconds:.1f} s; {failed[0]['text']}")

"""The storage area through Slurm: on the ``ci`` profile every check of it passes (the run is
PARTIAL, the area alone being selected), the checkpoint from a CPU rank per node among them; with
node4's disk throttled (a blkio cgroup around its slurmd, which its job steps inherit), node4 is
rejected by name with its mount and node3 is not; with both nodes throttled under a line, the
shared filesystem is named and no node is excluded."""

from __future__ import annotations

import os
import time
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


def test_the_storage_area_passes_on_the_ci_profile(run_acceptance):
    start = time.monotonic()
    run = run_acceptance(AREA)
    tests = {t["nodeid"].split("::")[-1]: t for t in run.results["tests"]}
    assert sorted(tests) == [
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
    ], run.output[-3000:]
    assert all(t["verdict"] in ("pass", "warn") for t in tests.values()), run.output[-3000:]
    assert run.results["acceptance"]["verdict"] == "PARTIAL", run.results["acceptance"]
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
    imports = {n: round(f["import_s"], 2) for n, f in nodes.items()}
    save = checkpoint["save"]
    ran = {j["name"].rsplit("-", 1)[-1]: j.get("workload_s") for t in tests.values() for j in t.get("jobs", [])}
    print(
        f"storage area on ci: {time.monotonic() - start:.1f} s; jobs ran {ran} s; cold import {imports}; "
        f"checkpoint {save['bytes'] / 1e6:.2f} MB saved in {save['s']:.2f} s, slowest {save['slowest']}"
    )


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

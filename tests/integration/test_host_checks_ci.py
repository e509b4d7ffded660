"""The host checks through Slurm on node3/node4: with node4's slurmd (and so every job step it
starts) held to a quarter of one CPU by a cgroup v1 CPU quota, node4's Add kernel moves a fraction
of node3's bytes: node4 is rejected naming its NUMA node and node3 is not; both nodes' clocks are
one kernel's, so the offset between them passes (an unsynchronized kernel clock, as on a VM
without a time daemon, is the one warning)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from faults_support import fault_profile, remove_cgroup, run_pytest

from gpucluster_testcluster import ClusterInfo, TestCluster
from gpucluster_testcluster.config import Paths
from gpucluster_testcluster.proc import alive_from_pid_file

pytestmark = pytest.mark.integration

CPU = Path("/sys/fs/cgroup/cpu")
QUOTA_US, PERIOD_US = 25_000, 100_000  # a quarter of one CPU
# A line the throttled node falls under and the healthy one, faster than its one peer, never does.
LINE = """
[thresholds.host-line]
extends = "cpu"
"host.memory_fraction_of_median" = { unit = "ratio", fail_below = 0.5, source = "a line above the quota" }
"""


@contextmanager
def cpu_quota(info: ClusterInfo, node: str) -> Iterator[None]:
    """``node``'s slurmd in a CPU cgroup (v1) with a quarter of one CPU; back in the root group after."""
    if not (CPU / "cpu.cfs_quota_us").exists():
        pytest.skip("no cgroup v1 CPU controller at /sys/fs/cgroup/cpu to hold a slurmd to a quota")
    pid = alive_from_pid_file(Paths(state_dir=info.state_dir, shared_dir=info.shared_dir).slurmd_pid(node), "slurmd")
    assert pid is not None, f"{node}'s slurmd is not running"
    group = CPU / f"gpucluster-host-ci-{time.monotonic_ns()}"
    group.mkdir()
    try:
        (group / "cpu.cfs_period_us").write_text(f"{PERIOD_US}\n")
        (group / "cpu.cfs_quota_us").write_text(f"{QUOTA_US}\n")
        (group / "cgroup.procs").write_text(f"{pid}\n")
        yield
    finally:
        (CPU / "cgroup.procs").write_text(f"{pid}\n")
        for task in (group / "cgroup.procs").read_text().split():  # a step still ending
            (CPU / "cgroup.procs").write_text(f"{task}\n")
        remove_cgroup(group)
        # A process moved back out of a quota keeps the scheduler's account of its time there,
        # which slows the next timed test on these nodes (docs/checks-node-config.md): a fresh slurmd.
        running = TestCluster.from_running()
        assert running is not None, "the test cluster stopped"
        running.kill_slurmd(node)
        running.start_slurmd(node)


def test_a_node_held_to_a_quarter_cpu_is_named_for_its_memory_bandwidth(slurm_cluster, tmp_path):
    profile = fault_profile(tmp_path, extra_text=LINE, queue_timeout_s=30, thresholds="host-line")
    selection = ("tests/acceptance/test_node_config.py", "-k", "host_memory or clock")
    try:
        with cpu_quota(slurm_cluster, "node4"):
            run = run_pytest(profile, tmp_path, *selection, timeout=300)
    finally:
        profile.cancel_all()
    tests = {t["nodeid"].split("::")[-1]: t for t in run.results["tests"]}
    slow = tests["test_host_memory_bandwidth_per_numa_node[node4]"]
    assert slow["verdict"] == "fail", run.output[-3000:]
    (finding,) = [f for f in slow["findings"] if f["severity"] == "fail"]
    assert finding["culprits"] == ["node4"] and finding["metric"] == "host.memory_fraction_of_median", finding
    assert finding["text"].startswith("node4: host memory of NUMA node 0 moves "), finding
    assert tests["test_host_memory_bandwidth_per_numa_node[node3]"]["verdict"] == "pass", run.output[-3000:]
    for node in ("node3", "node4"):
        clock = tests[f"test_clock_synchronized_and_in_step[{node}]"]
        (offset,) = [m for m in clock["measurements"] if m["metric"] == "host.clock_offset"]
        assert offset["status"] == "pass" and offset["value"] < 100, offset
        # This machine runs no time daemon: where the kernel says so, that is the one warning.
        assert {f["setting"] for f in clock["findings"]} <= {"clock synchronization"}, clock["findings"]
    nodes = run.results["acceptance"]["nodes"]
    assert nodes["exclude"] == "node4", nodes
    assert nodes["verdicts"]["node3"]["verdict"] != "REJECTED", nodes
    rates = {
        t["params"]: [(m["metric"], round(m["value"], 3)) for m in t["measurements"]]
        for t in run.results["tests"]
        if "host_memory" in t["nodeid"]
    }
    print(f"node4 at a quarter CPU: {run.seconds:.1f} s; {rates}")

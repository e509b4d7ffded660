"""The host checks: the Add kernel run for real on this machine's CPUs, the clock exchanged for
real over TCP on this machine (a clock given as an offset function stands for another node's),
and the judging rules on typed reports: a slow NUMA node named against its peers, a partial CPU
share not judged against a socket's line, the clock's wrong node found by the median."""

from __future__ import annotations

import os
import socket
import threading
import time
from pathlib import Path

import pytest

from pytest_gpucluster.checks import host_checks as judge_host
from pytest_gpucluster.config import Threshold, ThresholdSet
from pytest_gpucluster.config.node_config import NodeConfig
from pytest_gpucluster.workloads import host_checks
from pytest_gpucluster.workloads.context import TaskContext
from pytest_gpucluster.workloads.host_checks import ClockReading, HostReport, NumaBandwidth


def lines(**more: Threshold) -> ThresholdSet:
    values = {
        judge_host.FRACTION: Threshold(judge_host.FRACTION, "ratio", 0.75, 0.9, source="sanity"),
        judge_host.OFFSET: Threshold(judge_host.OFFSET, "ms", fail_above=1000, warn_above=100, source="sanity"),
        **more,
    }
    return ThresholdSet("site", values)


def numa(index: int, gb_s: float, cpus: int = 56, total: int = 56) -> NumaBandwidth:
    return NumaBandwidth(index, cpus, total, 3 * 2**29, gb_s, gb_s, 5)


def host(node: str, *rates: float, cpus: int = 56, clock: ClockReading | None = None) -> HostReport:
    return HostReport(node, 2 * cpus, tuple(numa(i, r, cpus) for i, r in enumerate(rates)), clock=clock)


def clock(offset_ms: float | None, reference: str = "node1", synced: bool | None = True) -> ClockReading:
    return ClockReading(synced, 1000, 100, ("chronyd",), reference=reference, offset_ms=offset_ms, round_trip_ms=0.1)


# --- the workload, for real on this machine -----------------------------------------------------


def test_numa_nodes_are_read_from_sysfs_and_default_to_every_cpu(tmp_path: Path):
    for index, cpus in ((0, "0-1"), (1, "2-3"), (2, "")):  # node 2: memory only, no CPUs
        (tmp_path / f"node{index}").mkdir()
        (tmp_path / f"node{index}" / "cpulist").write_text(cpus + "\n")
    assert host_checks.numa_cpus(tmp_path) == {0: [0, 1], 1: [2, 3]}
    assert host_checks.numa_cpus(tmp_path / "absent") == {0: sorted(os.sched_getaffinity(0))}


def test_the_add_kernel_measures_each_numa_node_of_the_cpus_held(tmp_path: Path):
    held = sorted(os.sched_getaffinity(0))
    (tmp_path / "node0").mkdir()
    (tmp_path / "node0" / "cpulist").write_text(",".join(map(str, held)))
    (tmp_path / "node1").mkdir()
    (tmp_path / "node1" / "cpulist").write_text("4096-4097")  # no CPU of it held: not measured
    (only,) = host_checks.memory_bandwidth(8 * 2**20, 3, tmp_path)
    assert (only.numa_node, only.cpus, only.cpus_total, only.passes) == (0, len(held), len(held), 3)
    assert only.bytes_per_pass >= 3 * 8 * 2**20 - 3 * 8 * len(held)
    assert only.gb_s >= only.gb_s_median > 0


def test_the_kernels_clock_state_and_daemons_are_read(tmp_path: Path):
    synced, max_error, est_error = host_checks.kernel_clock()
    assert synced in (True, False) and isinstance(max_error, int) and isinstance(est_error, int)
    (tmp_path / "17").mkdir()
    (tmp_path / "17" / "comm").write_text("chronyd\n")
    (tmp_path / "18").mkdir()
    (tmp_path / "18" / "comm").write_text("bash\n")
    assert host_checks.time_daemons(tmp_path) == ("chronyd",)


def _context(rank: int, port: int) -> TaskContext:
    hosts = ("node1", "node2")
    return TaskContext("7", rank, 0, rank, 2, 2, hosts[rank], hosts, "127.0.0.1", port - 1)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_the_offset_from_the_first_node_is_measured_over_tcp():
    port = _free_port()
    found: dict[int, ClockReading] = {}

    def first() -> None:
        found[0] = host_checks.clock_offset(_context(0, port), 8, 10.0)

    server = threading.Thread(target=first)
    server.start()
    # The second node's clock runs 250 ms ahead of the first's.
    found[1] = host_checks.clock_offset(_context(1, port), 8, 10.0, clock=lambda: time.time() + 0.25)
    server.join(15)
    assert found[0].reference == "node1" and found[0].offset_ms is None and not found[0].error
    second = found[1]
    assert second.reference == "node1" and not second.error, second
    assert second.round_trip_ms is not None and second.offset_ms is not None
    assert abs(second.offset_ms - 250) <= second.round_trip_ms / 2 + 1


def test_no_first_node_to_answer_is_said_not_hidden():
    port = _free_port()
    got = host_checks.clock_offset(_context(1, port), 4, 0.5)
    assert got.offset_ms is None and f"no time exchange with node1 on port {port}" in got.error


def test_one_node_reads_its_clock_state_only():
    got = host_checks.measure_node(
        TaskContext("1", 0, 0, 0, 1, 1, "node1", ("node1",), "127.0.0.1", 20001), array_bytes=2**20, passes=1
    )
    assert got.node == "node1" and got.clock is not None and got.clock.offset_ms is None and not got.clock.reference
    assert got.memory and not got.memory_error


# --- judging ------------------------------------------------------------------------------------


def test_a_numa_node_below_its_peers_is_its_nodes_fault_and_named():
    reports = {"node1": host("node1", 230, 228), "node2": host("node2", 231, 120), "node3": host("node3", 229, 232)}
    slow = judge_host.memory(reports, "node2", lines(), "42")
    (f,) = [f for f in slow.findings if f.severity == "fail"]
    assert f.convicts == ("node2",) and f.metric == judge_host.FRACTION and "NUMA node 1 moves 120 GB/s" in f.text
    assert "a missing or slower DIMM" in f.text
    # The socket line is the site's: unset, each NUMA node is kept unjudged and a warning asks for it.
    assert [m.metric for m in slow.unjudged] == [judge_host.BANDWIDTH] * 2
    assert any(f.scope == "config" and f.metric == judge_host.BANDWIDTH for f in slow.findings)
    fine = judge_host.memory(reports, "node1", lines(), "42")
    assert not [f for f in fine.findings if f.severity == "fail"]
    assert all(v.status == "pass" for v in fine.verdicts)


def test_the_socket_line_judges_only_a_whole_numa_node():
    line = Threshold(judge_host.BANDWIDTH, "GB/s", 150, 200, source="the site's calibration")
    whole = judge_host.memory({"node1": host("node1", 140, 230)}, "node1", lines(**{judge_host.BANDWIDTH: line}))
    assert [v.status for v in whole.verdicts if v.measurement.metric == judge_host.BANDWIDTH] == ["fail", "pass"]
    # The node's other socket is a peer too.
    ratios = [v for v in whole.verdicts if v.measurement.metric == judge_host.FRACTION]
    assert [(round(v.measurement.value, 2), v.status) for v in ratios] == [(0.61, "fail"), (1.64, "pass")]
    part = judge_host.memory(
        {"node1": host("node1", 12.0, cpus=1)}, "node1", lines(**{judge_host.BANDWIDTH: line}), "42"
    )
    assert not part.verdicts and [m.metric for m in part.unjudged] == [judge_host.BANDWIDTH]
    (f,) = part.findings
    assert (f.scope, f.severity, f.setting) == ("config", "warn", "cpus_per_task") and "1 of its 56 CPUs" in f.text


def test_a_failed_measurement_is_not_judged_with_its_reason():
    broken = HostReport("node1", 4, memory_error="MemoryError: ")
    (f,) = judge_host.memory({"node1": broken}, "node1", lines()).findings
    assert f.severity == "not_judged" and "host memory bandwidth not measured: MemoryError" in f.text
    (none,) = judge_host.memory({"node1": HostReport("node1", 4)}, "node1", lines()).findings
    assert none.severity == "not_judged" and "none of the task's 4 CPUs is on a NUMA node" in none.text


def test_an_unsynchronized_clock_is_a_warning_of_the_node_unless_the_profile_waives_it():
    free = HostReport("node1", 4, clock=ClockReading(False, 16_000_000, 16_000_000, ()))
    (f,) = judge_host.synchronized(free, NodeConfig()) or ()
    assert (f.scope, f.setting, f.severity, f.nodes) == ("node_setting", "clock synchronization", "warn", ("node1",))
    assert "no time daemon running" in f.found and "chrony" in f.remedy
    assert judge_host.synchronized(free, NodeConfig(clock_synced=False)) is None
    kept = HostReport("node1", 4, clock=ClockReading(True, 1000, 10, ("chronyd",)))
    assert judge_host.synchronized(kept, NodeConfig()) == ()


def test_the_first_nodes_wrong_clock_falls_on_it_by_the_median():
    # node1 is the reference; node2 and node3 read +2.5 s from it: node1's clock is the wrong one.
    reports = {
        "node1": host("node1", 230, clock=ClockReading(True, 1, 1, (), reference="node1")),
        "node2": host("node2", 230, clock=clock(2500.0)),
        "node3": host("node3", 230, clock=clock(2500.4)),
    }
    assert judge_host.offsets(reports) == pytest.approx({"node1": -2500.0, "node2": 0.0, "node3": 0.4})
    (f,) = judge_host.clock_offset(reports, "node1", lines()).findings
    assert f.convicts == ("node1",) and f.severity == "fail" and "-2500 ms from the median" in f.text
    # A setting of the node: what was found, what is expected and from where, and how to change it.
    assert (f.scope, f.setting, f.found) == (
        "node_setting",
        "clock offset",
        "-2500 ms from the median of 3 nodes' clocks",
    )
    assert f.expected == "within 100 ms (host.clock_offset: fail > 1000 ms, warn > 100 ms)"
    assert "no time daemon runs" in f.remedy and "chronyd" in f.remedy and f.text.endswith(f"To change: {f.remedy}")
    assert (f.metric, f.value, f.unit) == (judge_host.OFFSET, pytest.approx(2500.0), "ms")
    for node in ("node2", "node3"):
        judged = judge_host.clock_offset(reports, node, lines())
        assert not judged.findings and [v.status for v in judged.verdicts] == ["pass"]


def test_two_clocks_apart_are_named_together_with_no_culprit():
    reports = {
        "node1": host("node1", 230, clock=ClockReading(True, 1, 1, (), reference="node1")),
        "node2": host("node2", 230, clock=clock(300.0)),
    }
    assert judge_host.offsets(reports) == pytest.approx({"node1": -300.0, "node2": 300.0})
    (f,) = judge_host.clock_offset(reports, "node2", lines()).findings
    assert f.severity == "warn" and f.nodes == ("node1", "node2") and not f.culprits
    assert "differ by 300 ms" in f.text and "nothing tells which clock is wrong" in f.text
    # Both nodes run chronyd: the change says what to look at in it, on both.
    assert (f.setting, f.found) == ("clock offset", "300 ms apart") and "chronyc tracking" in f.remedy
    assert f"To change, on both: {f.remedy}" in f.text


def test_the_clock_remedy_names_what_to_look_at_in_each_time_daemon():
    kept = ClockReading(True, 1, 1, ("ptp4l", "phc2sys"))
    said = judge_host.clock_remedy(kept)
    assert said.startswith("ptp4l and phc2sys run but") and "GET CURRENT_DATA_SET" in said and "PTP clock" in said
    timesyncd = judge_host.clock_remedy(ClockReading(True, 1, 1, ("systemd-timesyncd",)))
    assert "timedatectl timesync-status" in timesyncd
    # Not synchronized although chronyd runs: look at chronyd, not "run chrony".
    free = HostReport("node1", 4, clock=ClockReading(False, 16_000_000, 16_000_000, ("chronyd",)))
    (f,) = judge_host.synchronized(free, NodeConfig()) or ()
    assert (
        f.remedy.startswith("chronyd runs but the kernel reports the clock unsynchronized")
        and "chronyc sources" in f.remedy
    )


def test_an_offset_not_measured_is_not_judged_and_says_why():
    lost = ClockReading(True, 1, 1, (), reference="node1", error="no time exchange with node1 on port 21000: ...")
    reports = {"node1": host("node1", 230, clock=clock(None)), "node2": host("node2", 230, clock=lost)}
    (f,) = judge_host.clock_offset(reports, "node2", lines()).findings
    assert f.severity == "not_judged" and "clock offset not measured: no time exchange" in f.text


def test_a_client_that_stalls_does_not_cost_the_others_their_offset():
    with socket.create_server(("127.0.0.1", 0)) as sock:
        port = sock.getsockname()[1]
        stalled = socket.create_connection(("127.0.0.1", port))  # connects first, never asks
        deadline = time.monotonic() + 20
        server = threading.Thread(target=host_checks.serve_time, args=(sock, 2, 4, deadline, time.time))
        server.start()
        try:
            offset, trip = host_checks.ask_time("127.0.0.1", port, 4, deadline, time.time)
        finally:
            stalled.close()
            server.join(25)
    assert abs(offset) <= trip / 2 + 0.001 and not server.is_alive()

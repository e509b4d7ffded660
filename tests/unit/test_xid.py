"""Xid errors: kernel-log records (tests/data/xid), NVML event records, the watcher's bound, and the
judgement of a node (fail, warn, fold, not judged)."""

from __future__ import annotations

import pickle
import threading
import time
from pathlib import Path

import pynvml
import pytest

from pytest_gpucluster.checks import xid
from pytest_gpucluster.workloads import xid as node_xid
from pytest_gpucluster.workloads.context import local_context
from pytest_gpucluster.workloads.xid import KernelLog, WatchedGpu, XidEvent, XidWatch, XidWatcher

DATA = Path(__file__).parent.parent / "data" / "xid"
PROC = DATA / "proc"
BOOT = 1_780_000_000.0  # the recorded node's boot, epoch s
STARTED = BOOT + 1000.0  # the run's start: the sample's Xids at 842 s and 901 s were before it


def _records() -> list[str]:
    """The sample's records as /dev/kmsg hands them out: one per read, continuation lines included."""
    records: list[str] = []
    for line in (DATA / "kmsg_8xH100_representative_sample.txt").read_text().splitlines():
        if line.startswith(" ") and records:
            records[-1] += "\n" + line
        else:
            records.append(line)
    return records


def _log(**kw) -> KernelLog:
    lines = tuple(node_xid.xid_lines(_records()))
    return KernelLog("node1", True, lines=lines, gpus=node_xid.node_gpus(PROC), boot_epoch=BOOT, **kw)


def _watch(*events: XidEvent, job: str = "41", rank: int = 0, gpus: int = 8) -> XidWatch:
    watched = tuple(WatchedGpu(b, i) for i, b in enumerate(node_xid.node_gpus(PROC)[:gpus]))
    return XidWatch("node1", job, rank, watched, events, STARTED + 10, STARTED + 90)


def _gpu(index: int) -> WatchedGpu:
    return WatchedGpu(node_xid.node_gpus(PROC)[index], index)


# --------------------------------------------------------------------------- kernel log


def test_only_the_drivers_xid_lines_are_kept_with_their_time_since_boot():
    lines = node_xid.xid_lines(_records())
    assert [round(t, 3) for t, _ in lines] == [842.392, 901.554, 901.554, 1204.880, 1204.88, 1204.88, 1510.0]
    assert all(m.startswith("NVRM: Xid (PCI:") for _, m in lines)  # no SXid, mlx5 or other NVRM line


def test_a_kmsg_record_and_what_is_not_one():
    assert node_xid.kmsg_record("4,1514,1510000400,-;NVRM: Xid (PCI:0000:18:00): 79, GPU has fallen off the bus.") == (
        1510.0004,
        "NVRM: Xid (PCI:0000:18:00): 79, GPU has fallen off the bus.",
    )
    assert node_xid.kmsg_record(" SUBSYSTEM=pci") is None
    assert node_xid.kmsg_record("[  269.517039] NVRM: Xid (0000:01:00): 3, C 00000005") is None


def test_xid_lines_parse_bus_xid_and_the_drivers_words():
    parsed = [xid.parse_line(m) for _, m in node_xid.xid_lines(_records())]
    assert [(p.bus, p.xid) for p in parsed if p] == [
        ("0000:2a:00", 63),
        ("0000:3a:00", 13),
        ("0000:3a:00", 13),
        ("0000:9a:00", 48),
        ("0000:9a:00", 94),
        ("0000:9a:00", 154),
        ("0000:18:00", 79),
    ]
    assert parsed[0] is not None and parsed[0].detail.startswith("Row Remapper: New row marked")
    # Older drivers write the address without "PCI:".
    old = xid.parse_line("NVRM: Xid (0000:DB:00): 31, Ch 00000010, engmask 00000101, intr 10000000")
    assert old == xid.XidLine("0000:db:00", 31, "Ch 00000010, engmask 00000101, intr 10000000")
    assert xid.parse_line("nvidia-nvswitch2: SXid (PCI:0000:07:00.0): 12028, Non-fatal") is None
    assert xid.parse_line("NVRM: GPU 0000:18:00.0: GPU has fallen off the bus.") is None


def test_pci_addresses_of_every_source_meet():
    assert {node_xid.pci_key(a) for a in ("00000000:18:00.0", "0000:18:00.0", "PCI:0000:18:00", "0000:18:00")} == {
        "0000:18:00"
    }


def test_gpus_are_numbered_in_pci_bus_order():
    gpus = node_xid.node_gpus(PROC)
    assert gpus[0] == "0000:18:00" and gpus[4] == "0000:9a:00" and len(gpus) == 8
    assert node_xid.node_gpus(DATA / "nowhere") == ()


def test_an_unreadable_kernel_log_says_why():
    why = node_xid._not_readable("/dev/kmsg", PermissionError(1, "Operation not permitted"), PROC)
    assert why == "/dev/kmsg: Operation not permitted (kernel.dmesg_restrict = 1: only root may read it)"
    log = node_xid.read_kernel_log(local_context(), kmsg=str(DATA / "no-kmsg"), proc_root=PROC)
    assert not log.readable and "No such file or directory" in log.why and len(log.gpus) == 8


def test_this_machines_kernel_log_is_read_within_its_bound():
    start = time.monotonic()
    log = node_xid.read_kernel_log(local_context(), limit_s=5.0)
    assert time.monotonic() - start < 10.0
    assert log.readable or log.why.startswith("/dev/kmsg: ")
    assert all(node_xid.XID_MARK in m for _, m in log.lines)
    assert log.boot_epoch == pytest.approx(time.time() - time.clock_gettime(time.CLOCK_MONOTONIC_RAW), abs=5)


# --------------------------------------------------------------------------- NVML events


def test_an_nvml_event_record_names_the_gpu_by_its_handle():
    handles = [pynvml.c_nvmlDevice_t(pynvml.struct_c_nvmlDevice_t()) for _ in range(2)]
    registered = {node_xid.handle_address(h): _gpu(i) for i, h in enumerate(handles)}
    data = pynvml.c_nvmlEventData_t()
    data.device, data.eventType, data.eventData = handles[1], pynvml.nvmlEventTypeXidCriticalError, 79
    assert node_xid.event_of(data, registered, 123.5) == XidEvent(_gpu(1), 79, 123.5)
    data.device = pynvml.c_nvmlDevice_t(pynvml.struct_c_nvmlDevice_t())  # a device no task registered
    assert node_xid.event_of(data, registered, 1.0) == XidEvent(None, 79, 1.0)
    data.device = None
    assert node_xid.event_of(data, registered, 1.0) == XidEvent(None, 79, 1.0)
    data.eventType = pynvml.nvmlEventTypeClock
    assert node_xid.event_of(data, registered, 1.0) is None


class _Slow:
    """An event source that waits out every timeout, delivering ``xids`` one per wait first."""

    def __init__(self, xids: tuple[int, ...] = (), open_s: float = 0.0) -> None:
        self.xids = list(xids)
        self.open_s = open_s
        self.closed = threading.Event()

    def open(self):
        time.sleep(self.open_s)
        return (_gpu(0), _gpu(1)), ("NVML device 7: Not Supported",)

    def wait(self, timeout_ms):
        if self.xids:
            return XidEvent(_gpu(1), self.xids.pop(0), time.time())
        time.sleep(timeout_ms / 1000)
        return None

    def close(self):
        self.closed.set()


def test_the_watcher_stops_within_its_bound_and_keeps_what_it_saw():
    source = _Slow(xids=(79, 48))
    watcher = XidWatcher("node1", "41", 3, source, slice_ms=300).start()
    time.sleep(0.2)
    start = time.monotonic()
    watch = watcher.stop()
    assert time.monotonic() - start < 0.3 + 0.2
    assert [e.xid for e in watch.events] == [79, 48] and watch.events[0].gpu == _gpu(1)
    assert watch.gpus == (_gpu(0), _gpu(1)) and watch.error == "" and watch.notes == ("NVML device 7: Not Supported",)
    assert (watch.node, watch.job_id, watch.rank) == ("node1", "41", 3)
    assert source.closed.wait(1.0)
    assert pickle.loads(pickle.dumps(watch)) == watch


def test_a_source_still_opening_does_not_hold_the_task():
    watcher = XidWatcher("node1", "41", 0, _Slow(open_s=3.0), slice_ms=100, grace_s=0.2).start()
    start = time.monotonic()
    watch = watcher.stop()
    assert time.monotonic() - start < 0.5
    assert watch.gpus == () and watch.error.startswith("NVML had not opened the GPUs")


def test_without_nvml_the_watch_says_so():
    watch = XidWatcher("node1", "41", 0).start().stop()
    if watch.gpus:
        pytest.skip("this machine has GPUs NVML can open")
    assert watch.error.startswith(("NVML unavailable: ", "NVML opened no GPU here")), watch.error


# --------------------------------------------------------------------------- judging


def _texts(found: xid.NodeXids, severity: str) -> list[str]:
    return [f.text for f in found.found if f.severity == severity]


def test_during_the_run_a_reset_or_reboot_xid_fails_and_before_it_warns():
    found = xid.judge_node("node1", [], _log(), STARTED)
    assert _texts(found, "not_judged") == []
    assert _texts(found, "fail") == [
        "node1:gpu4 Xid 48 (Double Bit ECC Error) during the run, 1 event (kernel log); reset the GPU",
        "node1:gpu0 Xid 79 (GPU has fallen off the bus) during the run, 1 event (kernel log); reboot the node",
        "node1:gpu4 Xid 154 (GPU Recovery Action Changed) during the run, 1 event (kernel log); "
        "do what the driver's recovery action says",
    ]
    warned = _texts(found, "warn")
    assert warned[0] == (
        "node1:gpu4 Xid 94 (Contained ECC error) during the run, 1 event (kernel log); the application it hit ended"
    )
    before = warned[1:]
    assert before[0].startswith("node1:gpu2 Xid 13 (Graphics Engine Exception) logged since boot, before the run (")
    assert before[0].endswith("), 2 events (kernel log); the application it hit ended")
    assert before[1].startswith("node1:gpu1 Xid 63 (ECC page retirement or row remapping recording event) logged")
    assert len(warned) == 3
    assert found.sources["kernel log"] == "7 Xid line(s) since boot"
    # each Xid of one GPU is that GPU's, the node its culprit
    assert [(f.scope, f.gpu, f.culprits) for f in found.found][:2] == [("gpu", 4, ("node1",)), ("gpu", 0, ("node1",))]


def test_the_same_xid_on_several_gpus_is_one_sentence_with_the_count():
    events = [XidEvent(_gpu(i), 48, STARTED + 20 + i * 5) for i in range(4)] + [XidEvent(_gpu(2), 48, STARTED + 60)]
    # Two tasks of one job watched every GPU (no device cgroups): each saw every event.
    found = xid.judge_node("node1", [_watch(*events, rank=0), _watch(*events, rank=1)], None, STARTED)
    (failed,) = found.found
    assert failed.text == (
        "node1:gpu[0-3] Xid 48 (Double Bit ECC Error) during the run, on 4 GPUs, 5 events (NVML); reset the GPU"
    )
    assert (failed.scope, failed.gpu, failed.culprits, failed.severity) == ("node", None, ("node1",), "fail")
    assert found.sources["NVML"] == "gpu[0-7] watched in 1 job(s): 41"
    assert found.sources["kernel log"] == "not readable: not read"


def test_the_kernel_log_counts_where_it_has_the_xid_and_nvml_adds_what_it_lacks():
    nvml = _watch(XidEvent(_gpu(0), 79, BOOT + 1510.2), XidEvent(_gpu(6), 74, BOOT + 1300.0))
    found = xid.judge_node("node1", [nvml], _log(), STARTED)
    assert (
        "node1:gpu0 Xid 79 (GPU has fallen off the bus) during the run, 1 event (NVML, kernel log); reboot the node"
        in _texts(found, "fail")
    )
    assert "node1:gpu6 Xid 74 (NVLink Error) during the run, 1 event (NVML); reset the GPU" in _texts(found, "fail")


def test_an_xid_the_table_lacks_warns_and_154_back_to_none_asks_nothing():
    assert not xid.kind_of(31).fails and xid.kind_of(999).meaning == "not in the suite's Xid table"
    assert not xid.kind_of(154, "GPU recovery action changed from 0x1 (GPU Reset Required) to 0x0 (None)").fails
    assert xid.kind_of(154, "GPU recovery action changed from 0x0 (None) to 0x2 (Node Reboot Required)").fails
    found = xid.judge_node("node1", [_watch(XidEvent(_gpu(5), 999, STARTED + 5))], None, STARTED)
    assert _texts(found, "fail") == []
    assert _texts(found, "warn")[0] == (
        "node1:gpu5 Xid 999 (not in the suite's Xid table) during the run, 1 event (NVML); see NVIDIA's Xid catalog"
    )
    assert (found.found[0].scope, found.found[0].gpu) == ("gpu", 5)


def test_the_azure_health_checks_xids_all_fail():
    for number in (48, 56, 57, 58, 62, 63, 64, 65, 68, 69, 73, 74, 79, 80, 81, 92, 119, 120):
        assert xid.XIDS[number].fails and "Azure" in xid.XIDS[number].source, number


def test_neither_source_is_not_judged_never_a_pass():
    restricted = "/dev/kmsg: Operation not permitted (kernel.dmesg_restrict = 1: only root may read it)"
    unreadable = KernelLog("node1", False, restricted)
    no_nvml = XidWatch(
        "node1", "41", 0, error="NVML unavailable: NVMLError_LibraryNotFound: NVML Shared Library Not Found"
    )
    (unjudged,) = xid.judge_node("node1", [no_nvml, no_nvml], unreadable, STARTED).found
    assert unjudged.text == (
        f"node1: Xids not judged: kernel log not readable ({restricted}) and no NVML watch (NVML unavailable: "
        "NVMLError_LibraryNotFound: NVML Shared Library Not Found (2 tasks))"
    )
    assert (unjudged.scope, unjudged.nodes, unjudged.severity, unjudged.convicts) == (
        "node",
        ("node1",),
        "not_judged",
        (),
    )
    found = xid.judge_node("node1", [], None, STARTED, log_missing="job 52 has no reading from node1")
    assert _texts(found, "not_judged") == [
        "node1: Xids not judged: kernel log not readable (job 52 has no reading from node1) and no NVML watch "
        "(no GPU job of the run ran a task there)"
    ]


def test_gpus_no_task_watched_are_named_where_the_kernel_log_cannot_stand_in():
    unreadable = KernelLog("node1", False, "/dev/kmsg: Operation not permitted", gpus=node_xid.node_gpus(PROC))
    found = xid.judge_node("node1", [_watch(gpus=6)], unreadable, STARTED)
    assert [(f.text, f.scope, f.severity) for f in found.found] == [
        (
            "node1:gpu[6-7] not watched for Xids: no task of the run opened it through NVML and the kernel log is "
            "not readable",
            "node",
            "warn",
        )
    ]
    assert _texts(xid.judge_node("node1", [_watch(gpus=7)], unreadable, STARTED), "warn") == [
        "node1:gpu7 not watched for Xids: no task of the run opened it through NVML and the kernel log is not readable"
    ]
    assert xid.judge_node("node1", [_watch(gpus=7)], unreadable, STARTED).found[0].gpu == 7
    assert _texts(xid.judge_node("node1", [_watch(gpus=6)], _log(), STARTED), "warn")[-1].startswith(
        "node1:gpu1 Xid 63"
    )

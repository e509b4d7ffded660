"""Storage judged on typed reports: a slow node is named with its mount, every node slow alike is
the shared filesystem's (no node convicted), a line the site has not set warns, the sum is the
filesystem's, mounts that differ name the odd node, late files and unshared locks are found."""

from __future__ import annotations

import pytest

from pytest_gpucluster.checks import storage as checks
from pytest_gpucluster.checks import storage_coherence as coherence
from pytest_gpucluster.config import Threshold, ThresholdSet
from pytest_gpucluster.workloads.storage import DIRECT, MountFacts, StorageReport, Stream, Streams
from pytest_gpucluster.workloads.storage_coherence import LargeDirectory, LockResult, RoundTrips

NFS = MountFacts("/mnt/shared", "nfs4", "10.0.0.5:/export", ("hard", "nconnect=16", "proto=tcp", "rw", "vers=4.2"))
NODES = ("node1", "node2", "node3")
GB = 10**9


def streams(write_mb_s: float, read_mb_s: float | None = None, count: int = 1, verified: bool = True) -> Streams:
    """``count`` streams at once whose node rates are ``write_mb_s`` and ``read_mb_s``."""
    size = 4 * GB
    write_s, read_s = count * size / 1e6 / write_mb_s, count * size / 1e6 / (read_mb_s or write_mb_s)
    each = tuple(Stream(DIRECT, size, 16 * 2**20, write_s, read_s, verified) for _ in range(count))
    return Streams("python", DIRECT, each, write_s, read_s)


def report(node: str, rank: int, write_mb_s: float, read_mb_s: float | None = None, **more) -> StorageReport:
    fields = dict(mount=NFS, stream=streams(write_mb_s, read_mb_s), metadata_files=1000, metadata_s=(1.0, 0.5, 1.5))
    fields.update(more)
    return StorageReport(node, rank, f"/mnt/shared/x/{node}", **fields)


def lines(**bounds: dict) -> ThresholdSet:
    values = {
        "storage.fraction_of_node_median": Threshold("storage.fraction_of_node_median", "ratio", 0.5, 0.7),
        **{m: Threshold(m, unit, **b) for m, (unit, b) in bounds.items()},
    }
    return ThresholdSet("site", values)


def per_node(fail_below: float, unit: str = "MB/s") -> tuple[str, dict]:
    return unit, {"fail_below": fail_below, "source": "the site's storage contract"}


SITE = lines(
    **{
        "storage.write_per_node": per_node(1000),
        "storage.read_per_node": per_node(1000),
        "storage.write_aggregate": per_node(2500),
        "storage.read_aggregate": per_node(2500),
        "storage.write_per_gpu": per_node(100),
        "storage.read_per_gpu": per_node(100),
        "storage.metadata_ops": per_node(500, "ops/s"),
        "storage.large_dir_list": ("s", {"fail_above": 10, "source": "the site's storage contract"}),
    }
)


def fails(judged: checks.Judged) -> list:
    return [f for f in judged.findings if f.severity == "fail"]


def test_every_node_at_its_line_passes_with_each_rate_and_the_sum_judged():
    reports = [report(n, i, 1500) for i, n in enumerate(NODES)]
    judged = checks.throughput(reports, NODES, SITE, "7")
    assert judged.findings == ()
    metrics = sorted({v.measurement.metric for v in judged.verdicts})
    assert metrics == [
        "storage.fraction_of_node_median",
        "storage.read_aggregate",
        "storage.read_per_gpu",
        "storage.read_per_node",
        "storage.write_aggregate",
        "storage.write_per_gpu",
        "storage.write_per_node",
    ]
    (total,) = [v for v in judged.verdicts if v.measurement.metric == "storage.write_aggregate"]
    assert total.measurement.value == pytest.approx(4500) and total.status == "pass"


def test_one_node_far_below_its_peers_is_that_nodes_fault_naming_its_mount():
    reports = [report("node1", 0, 1500), report("node2", 1, 150), report("node3", 2, 1400)]
    judged = checks.throughput(reports, NODES, SITE, "7")
    found = fails(judged)
    assert {f.scope for f in found} == {"node"}
    assert {f.convicts for f in found} == {("node2",)}
    first = found[0].text
    assert first.startswith("node2: writes 150 MB/s on nfs4 10.0.0.5:/export at /mnt/shared, 0.10 of its peers'")


def test_every_node_slow_alike_is_the_shared_filesystems_finding_and_convicts_no_node():
    reports = [report(n, i, 400) for i, n in enumerate(NODES)]
    judged = checks.throughput(reports, NODES, SITE, "7")
    found = fails(judged)
    assert found and all(f.scope == "shared_fs" and f.convicts == () for f in found)
    (writes,) = [f for f in found if "every node writes" in f.text]
    assert "node1 400 MB/s, node2 400 MB/s, node3 400 MB/s" in writes.text
    assert "no node is at fault" in writes.text
    assert any(f.text.startswith("the shared filesystem: writes node1+node2+node3") for f in found)


def test_one_node_just_under_the_line_while_its_peers_meet_it_is_that_nodes():
    reports = [report("node1", 0, 1500), report("node2", 1, 900), report("node3", 2, 1400)]
    found = fails(checks.throughput(reports, NODES, SITE, "7"))
    assert [f.convicts for f in found if f.metric == "storage.write_per_node"] == [("node2",)]


def test_a_line_the_site_has_not_set_warns_asking_for_it_and_keeps_the_value():
    reports = [report(n, i, 50) for i, n in enumerate(NODES)]
    judged = checks.throughput(reports, NODES, lines(), "7")
    assert fails(judged) == []
    warned = [f for f in judged.findings if f.severity == "warn"]
    assert {f.setting for f in warned} == {
        f"thresholds.site.storage.{m}"
        for m in (
            "write_per_node",
            "read_per_node",
            "write_aggregate",
            "read_aggregate",
            "write_per_gpu",
            "read_per_gpu",
        )
    }
    assert all(f.scope == "config" and "no threshold for" in f.text for f in warned)
    assert {m.metric for m in judged.unjudged} >= {"storage.write_per_node", "storage.write_aggregate"}


def test_a_stream_not_measured_for_lack_of_free_space_is_not_judged_and_no_nodes_fault():
    short = report(
        "node3",
        2,
        1500,
        stream=None,
        short_of_space=True,
        not_measured="3 node(s) × 4 GiB would take more than 10% of the 5 GiB free",
    )
    judged = checks.throughput([report("node1", 0, 1500), report("node2", 1, 1500), short], NODES, SITE, "7")
    (why,) = [f for f in judged.findings if f.severity == "not_judged"]
    assert why.scope == "shared_fs" and why.convicts == ()


def test_too_few_free_inodes_is_not_judged_naming_the_mount_and_no_nodes_fault():
    why = f"4512 files and folders the job makes would take more than 10% of the 3000 inodes free on {NFS.describe()}"
    said = {"mount": NFS, "short_of_inodes": True, "not_measured": f"{why}: nothing written"}
    short = [StorageReport(n, i, f"/mnt/shared/x/{n}", **said) for i, n in enumerate(NODES)]
    found = [
        *checks.throughput(short, NODES, SITE, "7").findings,
        *checks.metadata(short, NODES, SITE, "7").findings,
        *coherence.visibility(short, SITE, "7").findings,
        *coherence.lock_findings(short),
        *coherence.large_directory(short, SITE, "7").findings,
        *coherence.visibility(short, SITE, "7", renamed=True).findings,
    ]
    # Streams, metadata, round trips written and renamed, lockf, flock, the large directory.
    assert len(found) == 7 * len(NODES)
    assert all(f.severity == "not_judged" and f.scope == "shared_fs" and f.convicts == () for f in found)
    assert all("nfs4 10.0.0.5:/export at /mnt/shared: nothing written" in f.text for f in found)
    assert found[0].text.startswith("node1: write and read streams not measured: 4512 files and folders")


def test_a_silent_node_and_a_wrong_read_back_are_the_nodes():
    bad = report("node2", 1, 1500)
    bad = StorageReport(**{**bad.__dict__, "stream": streams(1000, verified=False)})
    found = checks.not_measured([report("node1", 0, 1500), bad], NODES)
    assert sorted(f.convicts for f in found) == [("node2",), ("node3",)]


def test_metadata_rate_of_every_node_slow_alike_is_the_filesystems():
    slow = [report(n, i, 1500, metadata_s=(10.0, 5.0, 15.0)) for i, n in enumerate(NODES)]  # 100 ops/s
    (found,) = fails(checks.metadata(slow, NODES, SITE, "7"))
    assert found.scope == "shared_fs" and "creates/stats/unlinks" in found.text


def test_metadata_rates_summed_over_the_nodes_are_judged_as_the_filesystems_aggregate():
    # 1000 files, 3 s over the three phases: 1000 ops/s per node, 3000 summed.
    reports = [report(n, i, 1500) for i, n in enumerate(NODES)]
    judged = checks.metadata(reports, NODES, SITE, "7")
    (asked,) = [f for f in judged.findings if f.metric == "storage.metadata_aggregate"]
    assert asked.severity == "warn" and asked.scope == "config"
    (kept,) = [m for m in judged.unjudged if m.metric == "storage.metadata_aggregate"]
    assert kept.value == pytest.approx(3000) and kept.nodes == NODES and kept.unit == "ops/s"
    site = ThresholdSet("site", {**SITE.values, "storage.metadata_aggregate": Threshold(
        "storage.metadata_aggregate", "ops/s", fail_below=5000, source="the site's storage contract")})  # fmt: skip
    judged = checks.metadata(reports, NODES, site, "7")
    (total,) = [v for v in judged.verdicts if v.measurement.metric == "storage.metadata_aggregate"]
    assert total.status == "fail" and total.measurement.detail == "3 node(s) at once"
    (found,) = fails(judged)
    assert found.scope == "shared_fs" and found.convicts == () and "creates/stats/unlinks" in found.text
    nodes = checks.section(reports)["nodes"]
    assert nodes["node1"]["metadata_phase_ops_s"] == {"create": 1000.0, "stat": 2000.0, "unlink": 666.7}


def test_cold_import_slow_on_one_node_is_its_own_and_on_all_the_environments():
    line = lines(**{"storage.cold_import": ("s", {"fail_above": 30, "warn_above": 5})})
    one = [
        report(n, i, 1500, import_s=s, import_module="torch")
        for i, (n, s) in enumerate(zip(NODES, (1, 45, 2), strict=True))
    ]
    assert [f.convicts for f in fails(checks.cold_import(one, line, "7"))] == [("node2",)]
    every = [report(n, i, 1500, import_s=40.0, import_module="torch") for i, n in enumerate(NODES)]
    (found,) = fails(checks.cold_import(every, line, "7"))
    assert found.scope == "environment" and found.convicts == ()


def test_a_node_mounting_with_other_options_is_named_with_the_difference():
    other = MountFacts(NFS.mount_point, NFS.fstype, NFS.source, ("hard", "proto=tcp", "rw", "vers=3"))
    reports = [report("node1", 0, 1500), report("node2", 1, 1500, mount=other), report("node3", 2, 1500)]
    (found,) = coherence.mount_findings(reports)
    assert found.convicts == ("node2",)
    assert found.text == (
        "node2: mounts the shared filesystem with options other than its peers': vers=3 it alone has; "
        "lacking nconnect=16,vers=4.2"
    )


def test_the_client_address_option_differs_between_healthy_nodes():
    mine = [
        report(n, i, 1500, mount=MountFacts("/m", "nfs4", "s:/e", ("rw", f"clientaddr=10.0.0.{i}")))
        for i, n in enumerate(NODES)
    ]
    assert coherence.mount_findings(mine) == []


def visibility_line() -> ThresholdSet:
    return lines(**{"storage.visibility_round_trip": ("s", {"fail_above": 2, "warn_above": 1})})


def test_a_pair_whose_file_is_never_seen_fails_the_pair_without_a_culprit():
    reports = [
        report("node1", 0, 1500, peer="node2", round_trips_s=(0.01, 0.02)),
        report("node2", 1, 1500, peer="node3", round_trips_s=(0.01,), round_trips_missed=1),
        report("node3", 2, 1500, peer="node1", round_trips_s=(0.01, 0.03)),
    ]
    judged = coherence.visibility(reports, visibility_line(), "7")
    (found,) = fails(judged)
    assert found.scope == "nodes" and found.nodes == ("node2", "node3") and found.culprits == ()
    assert "1 never answered" in found.text


def test_the_one_node_in_every_late_pair_is_named_when_a_pair_without_it_is_not_late():
    # node2's client caches a name's absence: node1's pings reach it late, and so do node3's pongs.
    reports = [
        report("node1", 0, 1500, peer="node2", round_trips_s=(0.01,), round_trips_missed=3),
        report("node2", 1, 1500, peer="node3", round_trips_s=(0.02, 5.0)),
        report("node3", 2, 1500, peer="node1", round_trips_s=(0.01, 0.02)),
    ]
    (found,) = fails(coherence.visibility(reports, visibility_line(), "7"))
    assert found.convicts == ("node2",) and found.metric == "storage.visibility_round_trip"
    assert found.text.startswith("node2: every late pair holds it and a pair without it is not late")
    # Two nodes: both pairs hold both nodes, nothing tells which view is late.
    two = [
        report("node1", 0, 1500, peer="node2", round_trips_s=(5.0,)),
        report("node2", 1, 1500, peer="node1", round_trips_s=(0.02,), round_trips_missed=2),
    ]
    assert all(f.convicts == () for f in fails(coherence.visibility(two, visibility_line(), "7")))


def test_renamed_files_are_judged_on_their_own_line_and_one_seen_short_fails_the_pair():
    line = lines(**{
        "storage.renamed_visibility_round_trip": ("s", {"fail_above": 2, "warn_above": 1}),
        "storage.visibility_round_trip": ("s", {"fail_above": 2, "warn_above": 1}),
    })  # fmt: skip
    reports = [
        report("node1", 0, 1500, peer="node2", round_trips_s=(0.01,), renamed=RoundTrips((0.01, 0.02, 0.03))),
        report("node2", 1, 1500, peer="node3", round_trips_s=(0.01,), renamed=RoundTrips((0.01,), incomplete=2)),
        report("node3", 2, 1500, peer="node1", round_trips_s=(0.01,), renamed=RoundTrips((0.01, 0.04))),
    ]
    assert fails(coherence.visibility(reports, line, "7")) == []  # the written files were seen in time
    judged = coherence.visibility(reports, line, "7", renamed=True)
    assert {v.measurement.metric for v in judged.verdicts} == {"storage.renamed_visibility_round_trip"}
    (found,) = fails(judged)
    assert found.nodes == ("node2", "node3") and found.convicts == ()
    assert "2 seen under the new name but short" in found.text
    (first,) = [v for v in judged.verdicts if v.measurement.nodes == ("node1", "node2")]
    assert first.status == "pass" and first.measurement.detail.startswith("3 round trips, median 20.0 ms, max 30.0 ms")
    # Every pair late alike is the shared filesystem's, naming renamed files.
    late = [report(n, i, 1500, peer=NODES[(i + 1) % 3], renamed=RoundTrips((2.5, 3.0))) for i, n in enumerate(NODES)]
    (shared,) = fails(coherence.visibility(late, line, "7", renamed=True))
    assert shared.scope == "shared_fs" and shared.text.startswith("the shared filesystem: every node's renamed files")
    nodes = checks.section(reports)["nodes"]
    assert nodes["node2"]["renamed_round_trips_ms"] == [10.0] and nodes["node2"]["renamed_short"] == 2


def test_every_pair_late_is_the_shared_filesystems():
    reports = [report(n, i, 1500, peer=NODES[(i + 1) % 3], round_trips_s=(2.5, 3.0)) for i, n in enumerate(NODES)]
    (found,) = fails(coherence.visibility(reports, visibility_line(), "7"))
    assert found.scope == "shared_fs" and found.convicts == ()


HELD = {"lock": LockResult(True), "flock": LockResult(True, kind="flock")}
KEPT = {
    "lock": LockResult(False, kept_out=True, taken_after=True),
    "flock": LockResult(False, kept_out=True, taken_after=True, kind="flock"),
}


def test_a_lock_shared_by_no_node_is_the_filesystems_and_one_node_let_in_is_that_nodes():
    holder = report("node1", 0, 1500, **HELD)
    let_in = LockResult(False, kept_out=False, taken_after=True)
    (none,) = coherence.lock_findings(
        [
            holder,
            report("node2", 1, 1500, **{**KEPT, "lock": let_in}),
            report("node3", 2, 1500, **{**KEPT, "lock": let_in}),
        ]
    )
    assert none.scope == "shared_fs" and "does not share POSIX record locks (fcntl/lockf)" in none.text
    (one,) = coherence.lock_findings(
        [holder, report("node2", 1, 1500, **{**KEPT, "lock": let_in}), report("node3", 2, 1500, **KEPT)]
    )
    assert one.convicts == ("node2",) and one.text.startswith("node2: took the lockf lock node1 held")
    assert coherence.lock_findings([holder, report("node2", 1, 1500, **KEPT)]) == []


def test_a_flock_not_shared_where_lockf_is_is_found_and_each_kind_said():
    # An NFS mount with local_lock=flock: flock locks stay on each client, lockf locks reach the server.
    flock_in = LockResult(False, kept_out=False, taken_after=True, kind="flock")
    reports = [
        report("node1", 0, 1500, **HELD),
        *(report(n, i, 1500, **{**KEPT, "flock": flock_in}) for i, n in enumerate(NODES[1:], 1)),
    ]
    (found,) = coherence.lock_findings(reports)
    assert found.scope == "shared_fs" and found.severity == "fail" and found.convicts == ()
    assert found.text.startswith(f"the shared filesystem ({NFS.describe()}) does not share flock locks across nodes")
    assert coherence.locks_tried(reports) == {
        "node1": {"lockf": "held it while the others tried", "flock": "held it while the others tried"},
        **{n: {"lockf": "kept out, then took it", "flock": "let in, then took it"} for n in NODES[1:]},
    }
    # A node without a flock result is named, not passed over.
    (missing,) = coherence.lock_findings([reports[0], report("node2", 1, 1500, lock=KEPT["lock"])])
    assert missing.severity == "not_judged" and missing.text.startswith("node2: has no flock check")


def test_a_kind_of_lock_the_holder_could_not_take_is_not_judged_and_the_other_kind_is():
    never_held = LockResult(True, error="flock on /m/flock: not taken within 5 s", kind="flock")
    flock_in = LockResult(False, kept_out=False, taken_after=True, kind="flock")
    lockf_in = LockResult(False, kept_out=False, taken_after=True)
    reports = [
        report("node1", 0, 1500, lock=HELD["lock"], flock=never_held),
        *(report(n, i, 1500, lock=lockf_in, flock=flock_in) for i, n in enumerate(NODES[1:], 1)),
    ]
    unshared, unheld = coherence.lock_findings(reports)
    assert unshared.scope == "shared_fs" and "does not share POSIX record locks" in unshared.text
    assert unheld.severity == "not_judged" and unheld.text == f"node1: flock check not finished: {never_held.error}"


def test_a_node_without_a_metadata_rate_is_named_with_its_error():
    failed = report("node3", 2, 1500, metadata_files=0, errors=("metadata phase failed: [Errno 28] No space left",))
    found = fails(checks.metadata([report("node1", 0, 1500), report("node2", 1, 1500), failed], NODES, SITE, "7"))
    assert [(f.convicts, f.text) for f in found] == [
        (("node3",), "node3: measured no metadata rate (metadata phase failed: [Errno 28] No space left)")
    ]


def test_a_lock_the_holder_could_not_take_leaves_the_check_not_judged():
    holder = report("node1", 0, 1500, **{**HELD, "lock": LockResult(True, error="lockf on /m/lock: not taken in 5 s")})
    other = report(
        "node2", 1, 1500, **{**KEPT, "lock": LockResult(False, error="lock-held: rank(s) [0] missing after 120 s")}
    )
    found = coherence.lock_findings([holder, other])
    assert [f.severity for f in found] == ["not_judged", "not_judged"] and all(f.convicts == () for f in found)


def test_each_stream_is_judged_per_gpu_and_one_slow_stream_is_its_nodes():
    fast = streams(1600, count=8)
    slow_one = Streams("python", DIRECT, (*fast.each[:7], Stream(DIRECT, 4 * GB, 2**24, 80.0, 20.0, True)), 80.0, 20.0)
    reports = [report("node1", 0, 1600, stream=fast), report("node2", 1, 1600, stream=slow_one)]
    judged = checks.throughput(reports, ("node1", "node2"), SITE, "7")
    per_gpu = [v for v in judged.verdicts if v.measurement.metric == "storage.write_per_gpu"]
    assert len(per_gpu) == 16 and all(v.measurement.value == pytest.approx(200) for v in per_gpu[:15])
    found = [f for f in fails(judged) if f.metric == "storage.write_per_gpu"]
    assert [f.convicts for f in found] == [("node2",)] and "node2 stream 7" in judged.verdicts[15].measurement.detail


def test_every_stream_of_every_node_slow_alike_is_the_shared_filesystems():
    reports = [report(n, i, 1600, stream=streams(400, count=8)) for i, n in enumerate(NODES)]
    judged = checks.throughput(reports, NODES, SITE, "7")
    found = [f for f in fails(judged) if "every GPU writes its stream past the line alike" in f.text]
    assert len(found) == 1 and found[0].scope == "shared_fs" and found[0].convicts == ()


def listed(writer_files: int, listed_files: int, list_s: float = 2.0) -> list[StorageReport]:
    return [
        report("node1", 0, 1500, large_dir=LargeDirectory(True, writer_files, 30.0)),
        report("node2", 1, 1500, large_dir=LargeDirectory(False, listed=listed_files, list_s=list_s)),
    ]


def test_a_large_directory_listed_whole_and_in_time_passes():
    judged = coherence.large_directory(listed(100_000, 100_000), SITE, "7")
    assert judged.findings == ()
    (verdict,) = judged.verdicts
    assert verdict.status == "pass" and verdict.measurement.nodes == ("node1", "node2")
    assert "100000 files listed by node2" in verdict.measurement.detail


def test_a_large_directory_listed_short_fails_the_pair_and_a_slow_listing_is_judged():
    judged = coherence.large_directory(listed(100_000, 99_998, list_s=12.0), SITE, "7")
    texts = [f.text for f in fails(judged)]
    assert texts[0] == ("node2 lists 99998 files in the directory where node1 made 100000 (/mnt/shared/x/node1/large)")
    assert all(f.culprits == () for f in fails(judged)) and len(texts) == 2  # and the 12 s listing

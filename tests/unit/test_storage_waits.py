"""Storage judged when a node was late at a barrier: the nodes that waited for it and gave up are
not convicted for what they could not measure, the late node is named as the cause, and every
phase a node did not reach is not judged, never a silent pass."""

from __future__ import annotations

from test_storage_checks import NODES, SITE, report

from pytest_gpucluster.checks import storage as checks
from pytest_gpucluster.checks import storage_coherence as coherence
from pytest_gpucluster.workloads.storage import GaveUp, StorageReport
from pytest_gpucluster.workloads.storage_coherence import LargeDirectory, LockResult


def left_at(node: str, rank: int, barrier: str, missing: tuple[int, ...], names: tuple[str, ...], **more):
    """``node``'s report after it gave up at ``barrier``: what came after is not measured."""
    fields = dict(metadata_files=0, metadata_s=(0.0, 0.0, 0.0), barrier_timeout=GaveUp(barrier, missing, names, 120))
    fields.update(more)
    return report(node, rank, 1500, **fields)


def slow_node2() -> list[StorageReport]:
    """node2's streams are slow: node1 and node3 give up waiting for it at the metadata barrier;
    node2 comes later, measures its metadata and gives up at the visibility barrier, the others gone."""
    return [
        left_at("node1", 0, "metadata", (1,), ("node2",)),
        report("node2", 1, 60, barrier_timeout=GaveUp("visibility", (0, 2), ("node1", "node3"), 120)),
        left_at("node3", 2, "metadata", (1,), ("node2",)),
    ]


def not_judged(findings) -> list:
    return [f for f in findings if f.severity == "not_judged"]


def test_the_nodes_that_waited_for_a_slow_node_are_not_convicted_for_its_lateness():
    judged = checks.metadata(slow_node2(), NODES, SITE, "7")
    assert [f for f in judged.findings if f.convicts] == []
    waited = not_judged(judged.findings)
    assert sorted(f.nodes for f in waited) == [("node2", "node1"), ("node2", "node3")]
    assert all(f.culprits == ("node2",) for f in waited)
    assert waited[0].text == (
        "node2: not at barrier metadata within 120 s, where node1 gave up waiting: node1's metadata rate not measured"
    )


def test_the_slow_node_is_judged_on_its_streams_and_the_wait_after_them_convicts_no_one_else():
    judged = checks.throughput(slow_node2(), NODES, SITE, "7")
    assert {n for f in judged.findings for n in f.convicts} == {"node2"}
    assert not any("gave up" in f.text for f in judged.findings)


def test_round_trips_no_node_measured_for_a_wait_are_not_judged_naming_the_late_node():
    judged = coherence.visibility(slow_node2(), SITE, "7")
    found = judged.findings
    assert found and all(f.severity == "not_judged" and f.culprits == ("node2",) for f in found)
    assert {f.nodes[-1] for f in found} == set(NODES)
    (own,) = [f for f in found if f.nodes == ("node2",)]
    assert own.text == (
        "node2: not at barrier metadata within 120 s, where node1, node3 gave up waiting and left; node2 then gave "
        "up at barrier visibility: node2's round trips not measured"
    )


def test_a_lock_check_no_node_reached_is_not_judged():
    found = coherence.lock_findings(slow_node2())
    assert found and all(f.severity == "not_judged" and f.culprits == ("node2",) for f in found)
    assert {f.nodes[-1] for f in found} == set(NODES)


def test_a_large_directory_no_node_reached_is_not_judged():
    judged = coherence.large_directory(slow_node2(), SITE, "7")
    assert judged.findings and all(f.severity == "not_judged" for f in judged.findings)
    assert {f.nodes[-1] for f in judged.findings} == set(NODES)


def test_a_node_that_never_reported_is_named_by_its_host_name_from_the_wait():
    reports = [
        left_at("node1", 0, "streams", (2,), ("node3",), stream=None),
        left_at("node2", 1, "streams", (2,), ("node3",), stream=None),
    ]
    found = not_judged(checks.throughput(reports, NODES, SITE, "7").findings)
    assert {f.culprits for f in found} == {("node3",)} and {f.nodes[-1] for f in found} == {"node1", "node2"}
    assert not any(
        n in ("node1", "node2") for f in checks.throughput(reports, NODES, SITE, "7").findings for n in f.convicts
    )


def test_a_cold_import_not_reached_for_a_wait_is_not_judged():
    reports = [left_at("node1", 0, "start", (1,), ("node2",), stream=None), report("node2", 1, 1500, import_s=2.0)]
    (found,) = not_judged(checks.cold_import(reports, SITE, "7").findings)
    assert found.culprits == ("node2",) and found.nodes == ("node2", "node1")


def test_a_wait_inside_the_lock_check_names_the_node_late_at_its_first_barrier():
    # node1 took long to take the lock: node3 gave up at lock-held and went on; node1 and node2
    # then missed node3 at lock-tried.
    def lock(holder: bool, barrier: str, missing: tuple[int, ...], names: tuple[str, ...]) -> LockResult:
        g = GaveUp(barrier, missing, names, 120)
        return LockResult(holder, error=str(g), gave_up=g)

    flock = {"flock": LockResult(False, kept_out=True, taken_after=True, kind="flock")}
    reports = [
        report("node1", 0, 1500, lock=lock(True, "lock-tried", (2,), ("node3",)), flock=LockResult(True, kind="flock")),
        report("node2", 1, 1500, lock=lock(False, "lock-tried", (2,), ("node3",)), **flock),
        report("node3", 2, 1500, lock=lock(False, "lock-held", (0,), ("node1",)), **flock),
    ]
    found = coherence.lock_findings(reports)
    assert len(found) == 3 and all(f.severity == "not_judged" and f.culprits == ("node1",) for f in found)
    assert found[1].text == (
        "node1: not at barrier lock-held within 120 s, where node3 gave up waiting and left; node2 then gave up at "
        "barrier lock-tried: node2's lockf check not measured"
    )


def test_a_lister_that_gave_up_on_a_slow_writer_fails_neither():
    writer = LargeDirectory(True, 100_000, 950.0, gave_up=GaveUp("large-listed", (1,), ("node2",), 900))
    lister = LargeDirectory(False, gave_up=GaveUp("large-written", (0,), ("node1",), 900))
    reports = [report("node1", 0, 1500, large_dir=writer), report("node2", 1, 1500, large_dir=lister)]
    found = coherence.large_directory(reports, SITE, "7").findings
    assert len(found) == 2 and all(f.severity == "not_judged" and f.culprits == ("node1",) for f in found)
    assert found[1].text == (
        "node1: not at barrier large-written within 900 s, where node2 gave up waiting: node2's large directory "
        "not measured"
    )

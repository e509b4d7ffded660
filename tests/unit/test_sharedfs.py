"""The shared-filesystem workload on a real local directory, and its judging of sick reports."""

from __future__ import annotations

import os
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest

from pytest_gpucluster.checks import sharedfs as sharedfs_checks
from pytest_gpucluster.errors import GpuClusterError
from pytest_gpucluster.workloads import sharedfs
from pytest_gpucluster.workloads.context import local_context

DATA = Path(__file__).parent.parent / "data" / "sharedfs"


def _run_nodes(prepared: sharedfs.Prepared, world: int, timeout_s: float = 20.0, ranks=None):
    """Run check_node for ``ranks`` of a ``world``-task job in threads (all on this machine)."""
    out: dict[int, sharedfs.NodeReport] = {}

    def one(rank: int) -> None:
        ctx = replace(local_context(rank, world), hostname=f"n{rank}")
        out[rank] = sharedfs.check_node(
            ctx,
            root_template=prepared.root_template,
            name=prepared.name,
            token=prepared.token,
            file_bytes=4096,
            append_lines=20,
            timeout_s=timeout_s,
        )

    threads = [threading.Thread(target=one, args=(r,)) for r in (range(world) if ranks is None else ranks)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return [out[r] for r in sorted(out)]


def test_three_tasks_share_a_directory(tmp_path):
    prepared = sharedfs.prepare(str(tmp_path))
    assert os.stat(prepared.directory).st_mode & 0o777 == 0o700
    reports = _run_nodes(prepared, 3)
    assert [r.marker for r in reports] == ["ok"] * 3
    nodes = [r.node for r in reports]
    assert sharedfs_checks.visibility_findings(reports, prepared, nodes) == []
    assert sharedfs_checks.readback_findings(reports, nodes) == []
    assert sharedfs_checks.readback_findings(reports, nodes, renamed=True) == []
    assert sharedfs_checks.append_findings(reports, nodes) == []
    assert reports[0].append_lines == {0: 20, 1: 20, 2: 20}
    metrics = sharedfs_checks.space(reports, prepared.root, "7")
    assert [m.metric for m in metrics] == ["sharedfs.capacity", "sharedfs.free"]
    assert all(m.value > 0 and len(m.nodes) == 1 for m in metrics)
    sharedfs.cleanup(prepared)
    assert not prepared.directory.exists()


def test_root_is_expanded_from_the_environment(tmp_path):
    assert sharedfs.expand("/scratch/$USER/x", {"USER": "ana"}) == Path("/scratch/ana/x")
    assert sharedfs.expand("/a/${NODE}", {}) == Path("/a/${NODE}")


def test_a_node_that_does_not_share_the_directory(tmp_path, monkeypatch):
    # The node resolves $NODE to its own folder, the login node (no $NODE) to another one.
    (tmp_path / "n0").mkdir()
    (tmp_path / "$NODE").mkdir()
    prepared = sharedfs.prepare(str(tmp_path / "$NODE"), env={})
    monkeypatch.setenv("NODE", "n0")
    (report,) = _run_nodes(prepared, 1)
    assert report.marker == "missing"
    (found,) = sharedfs_checks.visibility_findings([report], prepared, ["n0"])
    assert (found.scope, found.culprits) == ("node", ("n0",))
    assert found.text.startswith(f"n0: does not see login-marker that the login node wrote in {prepared.directory}: ")
    assert f"{tmp_path}/n0 on n0 is not the login node's filesystem (not shared" in found.text
    assert [f.text for f in sharedfs_checks.append_findings([report], ["n0"])] == [
        "n0: took no part (it does not see the login node's directory)"
    ]


def test_a_node_that_wrote_nothing_where_the_jobs_files_are_does_not_see_the_shared_filesystem():
    report = sharedfs.NodeReport("n1", 0, "/mnt/sharedfs/.x", True, marker="ok", mode=0o700)
    prepared = sharedfs.Prepared("/mnt/sharedfs", "/mnt/sharedfs", ".x", "t")
    silent = {"n2": "silent: none of its tasks wrote a file into job 17's folder"}
    found = sharedfs_checks.visibility_findings([report], prepared, ["n1", "n2"], silent)
    assert [(f.culprits, f.text.split(":")[0]) for f in found] == [(("n2",), "n2")]
    assert "does not see the shared filesystem /mnt/sharedfs" in found[0].text
    # its partner's exchange names it first, and convicts no one by itself
    (missing,) = sharedfs_checks.readback_findings([report], ["n1", "n2"])
    assert (missing.nodes, missing.culprits) == (("n2", "n1"), ())


def test_missing_mount_and_missing_node():
    report = sharedfs.NodeReport("n1", 0, "/mnt/sharedfs/.x", root_exists=False)
    prepared = sharedfs.Prepared("/mnt/sharedfs", "/mnt/sharedfs", ".x", "t")
    found = sharedfs_checks.visibility_findings([report], prepared, ["n1", "n2"])
    assert [(f.text, f.culprits) for f in found] == [
        ("n2: sent no report from the shared-filesystem job", ("n2",)),
        ("n1: /mnt/sharedfs does not exist (shared filesystem not mounted?)", ("n1",)),
    ]
    space = sharedfs_checks.space([report], "/mnt/sharedfs", "7")
    assert [(m.metric, m.nodes, m.detail) for m in space] == [
        ("sharedfs.capacity", ("n1",), "/mnt/sharedfs"),
        ("sharedfs.free", ("n1",), "/mnt/sharedfs"),
    ]


def test_barrier_wait_is_bounded(tmp_path):
    prepared = sharedfs.prepare(str(tmp_path))
    (report,) = _run_nodes(prepared, 2, timeout_s=0.5, ranks=[0])  # rank 1 never comes
    assert report.barrier_timeout == "start: rank(s) [1] missing after 0 s"
    (found,) = sharedfs_checks.readback_findings([report], ["n0", "n1"])
    # Waiting for a missing partner is no fault of the waiting node: no culprit of its own.
    assert found.text == (
        "only 1 of 2 node(s) reported: no exchange with n1; n0 gave up waiting at barrier start: "
        "rank(s) [1] missing after 0 s"
    )
    assert found.culprits == () and set(found.nodes) == {"n0", "n1"}


def test_sick_reports_name_node_and_file():
    a = sharedfs.NodeReport(
        "n0",
        0,
        "/s/x",
        True,
        marker="ok",
        mode=0o700,
        wrote={"data-0.bin": "a" * 64},
        read={"data-1.bin": "b" * 64, "renamed-1.bin": ""},
        appended=5,
        append_lines={0: 5, 1: 3},
        append_garbled=1,
    )
    b = sharedfs.NodeReport(
        "n1",
        1,
        "/s/x",
        True,
        marker="ok",
        mode=0o755,
        wrote={"data-1.bin": "c" * 64, "renamed-1.bin": "d" * 64},
        read={"data-0.bin": "a" * 64},
        appended=5,
        append_lines={0: 5, 1: 5},
    )
    (wrong,) = sharedfs_checks.readback_findings([a, b], ["n0", "n1"])
    assert wrong.text == f"n0: read the file data-1.bin written by n1 with sha256 {'b' * 12}…, n1 wrote {'c' * 12}…"
    assert (wrong.nodes, wrong.culprits) == (("n0", "n1"), ())  # reader or writer: the pair together
    assert [f.text for f in sharedfs_checks.readback_findings([a, b], ["n0", "n1"], renamed=True)] == [
        f"n0: read the file published by rename renamed-1.bin written by n1 with sha256 …, n1 wrote {'d' * 12}…"
    ]
    assert [(f.text, f.culprits) for f in sharedfs_checks.append_findings([a, b], ["n0", "n1"])] == [
        ("n0: the shared append.log lost or doubled lines (n1 appended 5, 3 found)", ("n0",)),
        ("n0: the shared append.log has 1 torn or mixed line(s)", ("n0",)),
    ]
    prepared = sharedfs.Prepared("/s", "/s", "x", "t")
    assert [f.text for f in sharedfs_checks.visibility_findings([a, b], prepared, ["n0", "n1"])] == [
        "n1: the private directory reads as mode 0755, the login node made 0700"
    ]


def test_different_filesystems_are_named():
    nfs = sharedfs.Mount("/mnt/sharedfs", "nfs4", "10.0.0.5:/export")
    local = sharedfs.Mount("/", "ext4", "/dev/vda")
    a = sharedfs.NodeReport("n0", 0, "/mnt/sharedfs/x", True, mount=nfs, marker="ok", mode=0o700, capacity_bytes=100)
    b = sharedfs.NodeReport("n1", 1, "/mnt/sharedfs/x", True, mount=local, marker="ok", mode=0o700, capacity_bytes=50)
    prepared = sharedfs.Prepared("/mnt/sharedfs", "/mnt/sharedfs", "x", "t")
    found = sharedfs_checks.visibility_findings([a, b], prepared, ["n0", "n1"])
    # two nodes, no majority: named together, neither convicted
    assert [(f.text, f.nodes, f.culprits) for f in found] == [
        (
            "n0: /mnt/sharedfs/x lies on nfs4 10.0.0.5:/export at /mnt/sharedfs; "
            "n1: /mnt/sharedfs/x lies on ext4 /dev/vda at /",
            ("n0", "n1"),
            (),
        ),
        ("n0: the filesystem's size reads 0.0 GiB; n1: the filesystem's size reads 0.0 GiB", ("n0", "n1"), ()),
    ]
    # a third node on NFS makes the odd one out the culprit
    c = sharedfs.NodeReport("n2", 2, "/mnt/sharedfs/x", True, mount=nfs, marker="ok", mode=0o700, capacity_bytes=100)
    found = sharedfs_checks.visibility_findings([a, b, c], prepared, ["n0", "n1", "n2"])
    assert [(f.text, f.culprits) for f in found] == [
        ("n1: /mnt/sharedfs/x lies on ext4 /dev/vda at /", ("n1",)),
        ("n1: the filesystem's size reads 0.0 GiB", ("n1",)),
    ]


def test_mount_of_recorded_mountinfo():
    text = (DATA / "mountinfo-debian12.txt").read_text()
    assert sharedfs.mount_of("/srv/gpucluster-ci/shared", text) == sharedfs.Mount("/", "ext4", "/dev/vda")
    nfs = sharedfs.Mount("/mnt/sharedfs", "nfs4", "10.0.0.5:/export/shared")
    assert sharedfs.mount_of("/mnt/sharedfs/run1", text) == nfs
    assert sharedfs.mount_of("/mnt/with space/a", text).fstype == "virtiofs"
    assert sharedfs.mount_of("/mnt/sharedfsX", text).mount_point == "/"


def test_unusable_root_on_the_login_node(tmp_path):
    with pytest.raises(GpuClusterError, match=r"is the shared filesystem .* mounted and writable on the login node"):
        sharedfs.prepare(str(tmp_path / "absent"))


def _appended(node: str, rank: int, lines: dict[int, int], settle_s: float | None) -> sharedfs.NodeReport:
    return sharedfs.NodeReport(
        node, rank, "/s/x", True, marker="ok", appended=5, append_lines=lines, append_settle_s=settle_s
    )


def test_lines_seen_only_on_a_later_read_are_the_filesystems_stale_copy_not_a_nodes_loss():
    late = [_appended("n0", 0, {0: 5, 1: 5}, 0.0), _appended("n1", 1, {0: 5, 1: 5}, 0.84)]
    (found,) = sharedfs_checks.append_findings(late, ["n0", "n1"])
    assert (found.scope, found.severity, found.convicts, found.nodes) == ("shared_fs", "warn", (), ("n1",))
    assert "n1 0.84 s after the first" in found.text and "no close-to-open consistency" in found.text
    lost = [_appended("n0", 0, {0: 5, 1: 5}, 0.0), _appended("n1", 1, {0: 2, 1: 5}, None)]
    (gone,) = sharedfs_checks.append_findings(lost, ["n0", "n1"])
    assert gone.convicts == ("n1",) and gone.text == (
        "n1: the shared append.log lost or doubled lines (n0 appended 5, 2 found, still after 5 s of reading again)"
    )


def test_a_reader_reads_the_shared_file_again_until_every_line_shows(tmp_path, monkeypatch):
    path = tmp_path / sharedfs.APPEND_FILE
    path.write_text("0 0 tag\n0 1 tag\n1 0 tag\n")

    def finish() -> None:
        time.sleep(0.3)
        with path.open("a") as f:
            f.write("1 1 tag\n")

    writer = threading.Thread(target=finish)
    writer.start()
    counts, garbled, settle = sharedfs._settled_lines(path, "tag", 2, 2)
    writer.join()
    assert counts == {0: 2, 1: 2} and garbled == 0 and settle is not None and 0.2 <= settle < 3
    monkeypatch.setattr(sharedfs, "APPEND_SETTLE_S", 0.3)
    path.write_text("0 0 tag\n")
    assert sharedfs._settled_lines(path, "tag", 2, 1) == ({0: 1, 1: 0}, 0, None)


def test_a_file_whole_on_the_first_read_settles_at_once(tmp_path):
    path = tmp_path / sharedfs.APPEND_FILE
    path.write_text("0 0 tag\n1 0 tag\n")
    assert sharedfs._settled_lines(path, "tag", 2, 1) == ({0: 1, 1: 1}, 0, 0.0)

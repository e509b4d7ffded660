"""Each user's folder on the shared filesystem (run/shared_area.py): the top folder gets /tmp's
mode whoever makes it, each user's folder is theirs, and a top folder another user left with
their umask sends the run to a sibling of its own with the chmod that fixes it. The steps as
another user run the module's own source under /usr/bin/python3 as ``nobody``."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from pytest_gpucluster.run import shared_area
from pytest_gpucluster.run.shared_area import TOP, TOP_MODE, user_area

SOURCE = Path(shared_area.__file__).read_text()


@pytest.fixture
def shared() -> Iterator[Path]:
    """A shared filesystem's root as the test cluster makes it: mode 1777, under /tmp so that
    another user can reach it."""
    root = Path(tempfile.mkdtemp(prefix="gpucluster-shared-area-"))
    root.chmod(0o1777)
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_the_first_run_makes_the_top_folder_as_tmp_is_whatever_its_umask(shared):
    old = os.umask(0o077)
    try:
        area = user_area(shared, "alice")
    finally:
        os.umask(old)
    assert area == shared_area.Area(shared / TOP / "alice", made_top=True)
    assert _mode(shared / TOP) == TOP_MODE
    assert (shared / TOP / "alice").stat().st_uid == os.geteuid()


def test_a_top_folder_of_this_user_with_another_mode_gets_the_shared_one(shared):
    (shared / TOP).mkdir(mode=0o755)
    assert user_area(shared, "alice").path == shared / TOP / "alice"
    assert _mode(shared / TOP) == TOP_MODE


def test_a_name_held_by_something_else_sends_the_run_to_its_own_sibling(shared):
    (shared / TOP).mkdir()
    (shared / TOP / "alice").symlink_to("/etc")
    area = user_area(shared, "alice")
    assert area.path == shared / f"{TOP}-alice"
    fix = f"`chmod 1777 {shared / TOP}` (as its owner or root) lets every operator share it."
    assert area.note.endswith(f"this run keeps its files in {area.path}. {fix}")


def test_a_run_that_wrote_nothing_leaves_nothing_but_another_users_folder(shared):
    area = user_area(shared, "alice")
    jobs = area.path / "jobs" / "run1" / "ab12"
    jobs.mkdir(parents=True)
    (shared / TOP / "bob").mkdir()
    shared_area.remove_empty(jobs, area)
    assert sorted(p.name for p in (shared / TOP).iterdir()) == ["bob"]
    (shared / TOP / "bob").rmdir()
    (shared / TOP).rmdir()
    area = user_area(shared, "alice")
    shared_area.remove_empty(area.path / "jobs", area)  # never made: nothing to remove
    assert list(shared.iterdir()) == [shared / TOP]
    shared_area.remove_empty(area.path, area)
    assert list(shared.iterdir()) == []


def _as_nobody(shared: Path) -> dict[str, str]:
    if os.geteuid() != 0 or not Path("/usr/bin/python3").exists():
        pytest.skip("needs root and /usr/bin/python3 to act as another user")
    script = SOURCE + (
        "\nimport json, sys\n"
        "area = user_area(Path(sys.argv[1]))\n"
        "print(json.dumps({'path': str(area.path), 'note': area.note}))\n"
    )
    proc = subprocess.run(
        ["/usr/bin/python3", "-I", "-c", script, str(shared)],
        user="nobody",
        group="nogroup",
        extra_groups=[],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd="/",
    )
    assert proc.returncode == 0, proc.stderr
    return dict(json.loads(proc.stdout))


def test_after_roots_run_another_user_gets_a_folder_of_their_own_there(shared):
    user_area(shared, "root")
    seen = _as_nobody(shared)
    assert seen == {"path": str(shared / TOP / "nobody"), "note": ""}
    assert (shared / TOP / "nobody").stat().st_uid == 65534


def test_a_top_folder_another_user_left_with_their_umask_is_named_with_its_fix(shared):
    (shared / TOP).mkdir(mode=0o755)  # what an older version left, made by root
    (shared / TOP).chmod(0o755)
    seen = _as_nobody(shared)
    assert seen["path"] == str(shared / f"{TOP}-nobody")
    assert seen["note"].startswith(f"{shared / TOP} belongs to root with mode 0755, so nobody cannot keep a folder")
    assert f"`chmod 1777 {shared / TOP}`" in seen["note"]

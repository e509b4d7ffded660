"""The test cluster's operators (gpucluster_testcluster.operators): whether a user may run a
program is read from the folders on its way, as the kernel would decide it for that user."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpucluster_testcluster.operators import Operator, unreachable

NOBODY = Operator("nobody", 65534, 65534, Path("/nonexistent"))


@pytest.fixture
def open_dir() -> Iterator[Path]:
    """A folder under /tmp that anyone may enter (pytest's tmp_path sits in a private one)."""
    path = Path(tempfile.mkdtemp(prefix="gpucluster-operators-unit-"))
    path.chmod(0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def test_a_program_under_a_private_folder_cannot_be_run_by_another_user(open_dir):
    private = open_dir / "root-like"
    private.mkdir(mode=0o700)
    program = private / "python"
    program.write_text("#!/bin/sh\n")
    program.chmod(0o755)
    assert (
        unreachable(NOBODY, program) == f"nobody may not enter {private} (mode 0700, owner uid {private.stat().st_uid})"
    )
    private.chmod(0o711)
    assert unreachable(NOBODY, program) == ""


def test_a_program_another_user_may_not_execute_is_named(open_dir):
    program = open_dir / "tool"
    program.write_text("#!/bin/sh\n")
    program.chmod(0o700)
    assert unreachable(NOBODY, program).startswith(f"nobody may not run {program} (mode 0700")

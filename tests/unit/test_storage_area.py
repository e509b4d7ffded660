"""The storage jobs' private directory on the login node: a job still writing into it when the
run is interrupted is cancelled before the directory is removed, never after."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from pytest_gpucluster.run.areas.storage import private_directory


class Writer:
    """A job that notes, when cancelled, whether its directory was still there."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.cancelled_with_directory: bool | None = None

    def cancel(self) -> None:
        self.cancelled_with_directory = self.directory.is_dir()


def local(tmp_path: Path) -> SimpleNamespace:
    profile = SimpleNamespace(name="local", shared_fs=None, executor="local")
    return SimpleNamespace(profile=profile, job_root=str(tmp_path))


def interrupted(ctx: SimpleNamespace) -> tuple[Path, Writer]:
    """A job started in a private directory, then the run interrupted while it writes."""
    with private_directory(ctx, "storage job") as place:
        job = place.writing(Writer(place.directory))
        (place.directory / "stream-0").write_bytes(b"x")
        raise KeyboardInterrupt(place.directory, job)


def test_an_interrupt_cancels_the_writing_job_before_its_directory_is_removed(tmp_path):
    with pytest.raises(KeyboardInterrupt) as stopped:
        interrupted(local(tmp_path))
    directory, job = stopped.value.args
    assert job.cancelled_with_directory is True
    assert not directory.exists()


def test_a_job_that_ended_is_cancelled_harmlessly_and_the_directory_removed(tmp_path):
    with private_directory(local(tmp_path), "checkpoint job") as place:
        job = place.writing(Writer(place.directory))
    assert job.cancelled_with_directory is True and list(tmp_path.iterdir()) == []

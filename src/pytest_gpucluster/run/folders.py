"""The run's folders: this user's folder on the shared filesystem and the run's job folder.

Both are made on first use, so a run that submits nothing makes no folder. Slurm jobs keep their
pickles and logs in the user's folder on the profile's ``shared_fs`` (the nodes read them there);
the local executor's jobs in a private temporary folder, removed at the run's end.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pytest_gpucluster.config import Profile
from pytest_gpucluster.errors import SharedFsFault
from pytest_gpucluster.run import shared_area
from pytest_gpucluster.workloads import sharedfs

LOCAL_JOB_ROOT_PREFIX = "pytest-gpucluster-jobs-"


class RunFolders:
    """Where the run's jobs keep their files. ``say`` hears why the user's folder is not in the
    shared top folder (once); ``record`` receives the folder as a fact of the run's environment."""

    def __init__(
        self,
        profile: Profile,
        *,
        run_id: str,
        say: Callable[[str], None],
        record: Callable[[dict[str, Any]], None],
    ) -> None:
        self.profile = profile
        self.run_id = run_id
        self._say = say
        self._record = record
        self._area: shared_area.Area | None = None
        self._job_root: Path | None = None
        self.owns_job_root = False  # the job folder is this run's temporary folder

    @property
    def shared_root(self) -> Path:
        """The profile's ``shared_fs`` as this login node resolves it (``$VARS``, ``~``), or the home
        directory where the profile names none."""
        return sharedfs.expand(self.profile.shared_fs, os.environ) if self.profile.shared_fs else Path.home()

    @property
    def area(self) -> Path:
        """This user's folder on the profile's ``shared_fs`` (``run.shared_area``), made on first
        use: the run's job folders and the shared-filesystem check's scratch live in it, so that
        operators running one after another or at once never shut each other out. Where it is not
        the shared top folder, the run says why once. SharedFsFault when it cannot be made."""
        if self._area is None:
            shared = self.shared_root
            if not shared.is_dir():
                raise SharedFsFault(
                    f"shared_fs {str(shared)!r} of profile {self.profile.name!r} is not a directory on this "
                    "login node; mount the shared filesystem or fix shared_fs (jobs keep their files there)."
                )
            try:
                area = shared_area.user_area(shared)
            except OSError as exc:
                raise SharedFsFault.cannot_write(
                    str(shared),
                    str(exc.strerror or exc),
                    f"cannot make this user's folder {shared / shared_area.TOP / shared_area.user_name()}; jobs "
                    "keep their files there, so it must be writable and not full.",
                ) from None
            if area.note:
                self._say(f"warning: {area.note}")
            self._record({"kind": "environment", "facts": {"shared_area": str(area.path)}})
            self._area = area
        return self._area.path

    @property
    def existing_area(self) -> shared_area.Area | None:
        """This user's folder on ``shared_fs``, if the run made or found it."""
        return self._area

    @property
    def job_root(self) -> Path:
        """Folder for this run's job pickles and logs: in this user's folder on the shared
        filesystem for Slurm (nodes must read it), a private temporary folder for the local
        executor."""
        if self._job_root is None:
            if self.profile.executor == "slurm":
                root = self.area / "jobs" / self.run_id / uuid.uuid4().hex[:6]
                try:
                    root.mkdir(parents=True, exist_ok=True)
                except OSError as exc:
                    raise SharedFsFault.cannot_write(
                        str(self.shared_root),
                        str(exc.strerror or exc),
                        f"cannot create the job folder {root}; jobs keep their files there, so it must be "
                        "writable and not full.",
                    ) from None
                self._job_root = root
            else:
                remove_orphaned_job_roots(Path(tempfile.gettempdir()))
                self._job_root = Path(tempfile.mkdtemp(prefix=f"{LOCAL_JOB_ROOT_PREFIX}{os.getpid()}-"))
                self.owns_job_root = True
        return self._job_root

    @property
    def existing_job_root(self) -> Path | None:
        """The run's job folder, if it was made."""
        return self._job_root

    def writable_now(self) -> bool:
        """A folder can be made and removed where the run keeps its files, now (one try)."""
        root = self._area.path if self._area is not None else self.shared_root
        try:
            Path(tempfile.mkdtemp(prefix=".pytest-gpucluster-probe-", dir=root)).rmdir()
        except OSError:
            return False
        return True

    def clean_up(self) -> None:
        """At the run's end: the temporary job folder goes; on the shared filesystem, folders no
        job wrote into (every submission refused, shared_fs full) go too, and a folder with any
        job's logs stays for the operator."""
        root = self._job_root
        if root is None:
            return
        if self.owns_job_root:
            shutil.rmtree(root, ignore_errors=True)
        elif self._area is not None:
            shared_area.remove_empty(root, self._area)


def remove_orphaned_job_roots(tmp: Path) -> None:
    """Job folders of local runs whose process is gone (killed before it could clean up): the
    folder's name carries the run's process id. Folders of live runs, and of other users, stay."""
    for folder in tmp.glob(f"{LOCAL_JOB_ROOT_PREFIX}*-*"):
        pid = folder.name.removeprefix(LOCAL_JOB_ROOT_PREFIX).split("-", 1)[0]
        if not pid.isdigit() or Path(f"/proc/{pid}").exists():
            continue
        with contextlib.suppress(OSError):
            if folder.stat().st_uid == os.getuid():
                shutil.rmtree(folder, ignore_errors=True)

"""Each operator's place on the shared filesystem: ``<shared_fs>/.pytest-gpucluster/<user>/``.

Several operators hand over one cluster, one after another or at once, each as their own Unix
user. The top folder is made as /tmp is (mode 1777: anyone may add a folder, nobody may remove or
rename another's), and each user's folder below it is theirs; a run's job folders and the
shared-filesystem check's scratch live in it. A top folder that another user made with their
umask (0755: an older version of this plugin made it so) shuts everyone else out, and only its
owner can fix it: the run then keeps its files in a sibling of its own,
``<shared_fs>/.pytest-gpucluster-<user>/``, and says which ``chmod`` lets every operator share
the top folder again.
"""

from __future__ import annotations

import os
import pwd
import stat
import time
from dataclasses import dataclass
from pathlib import Path

TOP = ".pytest-gpucluster"
TOP_MODE = 0o1777
# Another run may have made the top folder a moment ago and not yet given it its mode.
RACE_S = 2.0
RACE_POLL_S = 0.05


@dataclass(frozen=True)
class Area:
    """Where this user's run keeps its files; ``note``: why not in the shared top folder;
    ``made_top``: this run made the shared top folder."""

    path: Path
    note: str = ""
    made_top: bool = False


def user_name() -> str:
    """The name of the user the run's files belong to (``uid1234`` where no passwd entry names it)."""
    uid = os.geteuid()
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid{uid}"


def user_area(shared: Path, user: str | None = None) -> Area:
    """This user's folder on ``shared`` (made when missing): ``.pytest-gpucluster/<user>``, else
    the sibling ``.pytest-gpucluster-<user>`` where the top folder shuts this user out. OSError
    when neither can be made (``shared`` read-only, full, not writable by this user)."""
    user = user or user_name()
    top = shared / TOP
    try:
        made = _make_top(top)
        return Area(_make_own(top / user, wait_for=top), made_top=made)
    except PermissionError as exc:
        sibling = _make_own(shared / f"{TOP}-{user}")
        return Area(sibling, note=_shut_out(top, user, sibling, exc))


def _make_top(top: Path) -> bool:
    """The shared top folder with /tmp's mode: made so, or given it when this user owns it; True
    when this call made it."""
    made = True
    try:
        top.mkdir(mode=TOP_MODE)
    except FileExistsError:
        made = False
    info = top.lstat()
    if not stat.S_ISDIR(info.st_mode):
        raise PermissionError(f"{top} is not a folder")
    if info.st_uid == os.geteuid() and stat.S_IMODE(info.st_mode) != TOP_MODE:
        os.chmod(top, TOP_MODE)  # mkdir's mode went through the umask, or an older version made it
    return made


def _make_own(folder: Path, wait_for: Path | None = None) -> Path:
    """``folder`` made by this user, or already theirs (a folder, not a link); PermissionError
    when another user holds the name. ``wait_for``: a top folder another run may have just made
    and not yet given its mode; while it is that young, a refusal is tried again."""
    deadline = time.monotonic() + RACE_S
    while True:
        try:
            folder.mkdir()
            break
        except FileExistsError:
            break
        except PermissionError:
            if wait_for is None or time.monotonic() > deadline or not _just_made(wait_for):
                raise
            time.sleep(RACE_POLL_S)
    info = folder.lstat()
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid():
        raise PermissionError(f"{folder} is not a folder of this user (owner uid {info.st_uid})")
    return folder


def remove_empty(folder: Path, area: Area) -> None:
    """At the end of a run: ``folder`` (in ``area``) and the folders above it up to this user's
    folder go while they are empty, and the shared top folder too when this run made it: a run
    whose jobs wrote nothing (every submission refused, the filesystem full) leaves nothing."""
    last = area.path.parent if area.made_top else area.path
    while folder == last or last in folder.parents:
        try:
            folder.rmdir()
        except OSError:
            return
        folder = folder.parent


def _just_made(top: Path) -> bool:
    """A top folder made within ``RACE_S`` that does not have its mode yet: another run is between
    its mkdir and its chmod."""
    try:
        info = top.stat()
    except OSError:
        return False
    return stat.S_IMODE(info.st_mode) != TOP_MODE and time.time() - info.st_ctime < RACE_S


def _shut_out(top: Path, user: str, sibling: Path, exc: OSError) -> str:
    """One sentence: why the top folder refused this user, where the run's files go instead, and
    the command that lets every operator share it again."""
    try:
        info = top.lstat()
        owner = pwd.getpwuid(info.st_uid).pw_name if _has_user(info.st_uid) else f"uid {info.st_uid}"
        what = f"belongs to {owner} with mode {stat.S_IMODE(info.st_mode):04o}"
    except OSError:
        what = "cannot be used"
    return (
        f"{top} {what}, so {user} cannot keep a folder in it ({exc.strerror or exc}); this run keeps its files in "
        f"{sibling}. `chmod 1777 {top}` (as its owner or root) lets every operator share it."
    )


def _has_user(uid: int) -> bool:
    try:
        pwd.getpwuid(uid)
    except KeyError:
        return False
    return True

"""Unprivileged operators of the test cluster: Unix users made for a test or a GPU run, and
commands run as them, the way a site's operators run the acceptance suite.

``python -m gpucluster_testcluster.operators add gcop1 gcop2`` makes the users (no login shell,
a home of their own under /tmp); ``run gcop1 -- CMD ...`` runs a command as one of them in the
current folder, with the caller's environment and the user's HOME, USER and LOGNAME;
``remove gcop1 gcop2`` deletes them and their homes. Needs root. The test cluster enforces no
accounting associations (no ``AccountingStorageEnforce``), so an operator needs no ``sacctmgr``
entry to submit, and has AdminLevel None: it may not drain nodes.
"""

from __future__ import annotations

import argparse
import os
import pwd
import shutil
import subprocess
import sys
import sysconfig
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from .proc import ClusterError, run

HOME_ROOT = Path("/tmp")
# The distribution's interpreter: outside any user's home, runnable by everyone.
SYSTEM_PYTHON = Path("/usr/bin/python3")


@dataclass(frozen=True)
class Operator:
    """A Unix user that runs the suite: name, uid, gid and a home it may write."""

    name: str
    uid: int
    gid: int
    home: Path

    def env(self, base: Mapping[str, str]) -> dict[str, str]:
        """``base`` with this user's HOME, USER and LOGNAME."""
        return {**base, "HOME": str(self.home), "USER": self.name, "LOGNAME": self.name}


def home_of(name: str) -> Path:
    return HOME_ROOT / f"gpucluster-operator-{name}"


def ensure_operator(name: str) -> Operator:
    """The user ``name``, made when missing (``useradd``: no login shell, no home made by it),
    with a home of its own; idempotent. ClusterError when it cannot be made."""
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        run(["useradd", "--no-create-home", "--home-dir", str(home_of(name)), "--shell", "/usr/sbin/nologin", name])
        entry = pwd.getpwnam(name)
    home = home_of(name)
    home.mkdir(mode=0o700, exist_ok=True)
    os.chown(home, entry.pw_uid, entry.pw_gid)
    return Operator(name, entry.pw_uid, entry.pw_gid, home)


def remove_operator(name: str) -> None:
    """Delete the user ``name`` and its home; nothing when there is no such user."""
    try:
        pwd.getpwnam(name)
    except KeyError:
        return
    run(["userdel", name], check=False)
    shutil.rmtree(home_of(name), ignore_errors=True)


def unreachable(op: Operator, path: Path) -> str:
    """Why ``op`` cannot run the program at ``path`` (a folder on its way it may not enter, or the
    file itself not executable), or empty when it can. ``/root`` is 0700 on many machines: a
    virtualenv whose interpreter lives under it cannot be run by anyone else."""
    target = path.resolve()
    for folder in [*reversed(target.parents), target]:
        try:
            info = folder.stat()
        except OSError as exc:
            return f"{folder}: {exc.strerror}"
        need = 0o1 if folder != target else 0o5
        if info.st_uid == op.uid:
            ok = info.st_mode & (need << 6)
        elif info.st_gid == op.gid:
            ok = info.st_mode & (need << 3)
        else:
            ok = info.st_mode & need
        if not ok:
            what = "enter" if folder != target else "run"
            return f"{op.name} may not {what} {folder} (mode {info.st_mode & 0o7777:04o}, owner uid {info.st_uid})"
    return ""


def python_for(op: Operator, folder: Path, *, python: Path | None = None) -> Path:
    """An interpreter ``op`` may run that imports what this one imports: ``python`` (this
    interpreter by default) where ``op`` may run it; otherwise a virtualenv made in ``folder`` from
    the distribution's ``/usr/bin/python3`` of the same minor version, whose site-packages adds
    this environment's own (a ``.pth`` line), the way a site's operators share one virtualenv.
    ClusterError naming what ``op`` cannot reach when neither works."""
    python = python or Path(sys.executable)
    if not unreachable(op, python):
        return python
    packages = Path(sysconfig.get_path("purelib"))
    for needed in (SYSTEM_PYTHON, packages):
        if why := unreachable(op, needed):
            raise ClusterError(f"{why}: {op.name} cannot run {python} or an interpreter beside it")
    version = run([SYSTEM_PYTHON, "-c", "import sys; print(*sys.version_info[:2], sep='.')"]).stdout.strip()
    ours = f"{sys.version_info.major}.{sys.version_info.minor}"
    if version != ours:
        raise ClusterError(
            f"{unreachable(op, python)}, and {SYSTEM_PYTHON} is Python {version}, not {ours}: "
            "it cannot load this environment's packages"
        )
    if not (folder / "bin" / "python").exists():
        run([SYSTEM_PYTHON, "-m", "venv", "--without-pip", folder])
        site = next((folder / "lib").glob("python*/site-packages"))
        (site / "gpucluster-parent.pth").write_text(f"import site; site.addsitedir({str(packages)!r})\n")
        for path in (folder, *folder.rglob("*")):  # readable by all, whatever root's umask
            if not path.is_symlink():
                path.chmod(0o755 if path.is_dir() else 0o644)
    return folder / "bin" / "python"


def run_as(
    op: Operator,
    argv: Sequence[str],
    *,
    env: Mapping[str, str],
    cwd: Path,
    timeout: float,
    umask: int = 0o022,
) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` as ``op`` (its uid, its group only, a login shell's umask), bounded by
    ``timeout``, output captured."""
    return subprocess.run(
        list(argv),
        user=op.uid,
        group=op.gid,
        extra_groups=[],
        umask=umask,
        env=op.env(env),
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def main(argv: Sequence[str] | None = None) -> int:
    """``add NAME...``, ``remove NAME...``, ``run NAME -- CMD...``."""
    words = list(sys.argv[1:] if argv is None else argv)
    command = words[words.index("--") + 1 :] if "--" in words else []
    words = words[: words.index("--")] if "--" in words else words
    parser = argparse.ArgumentParser(prog="python -m gpucluster_testcluster.operators", description=__doc__)
    parser.add_argument("action", choices=("add", "remove", "run"))
    parser.add_argument("names", nargs="+", help="user names (run: one, then -- and the command)")
    parser.add_argument("--timeout", type=float, default=3600.0, help="run: seconds before the command is stopped")
    args = parser.parse_args(words)
    if args.action == "run" and (len(args.names) != 1 or not command):
        parser.error("run takes one user name, then -- and the command")
    if os.geteuid() != 0:
        print("error: needs root", file=sys.stderr)
        return 1
    try:
        if args.action == "add":
            for name in args.names:
                op = ensure_operator(name)
                print(f"{op.name}: uid {op.uid}, home {op.home}")
            return 0
        if args.action == "remove":
            for name in args.names:
                remove_operator(name)
            return 0
        op = ensure_operator(args.names[0])
        why = unreachable(op, Path(shutil.which(command[0]) or command[0]))
        if why:
            print(f"error: {why}; make the interpreter reachable (a virtualenv outside /root)", file=sys.stderr)
            return 1
        env = op.env(os.environ)
        proc = subprocess.run(
            command, user=op.uid, group=op.gid, extra_groups=[], umask=0o022, env=env, timeout=args.timeout
        )
        return proc.returncode
    except subprocess.TimeoutExpired:
        print(f"error: stopped after {args.timeout:.0f} s", file=sys.stderr)
        return 124
    except ClusterError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())

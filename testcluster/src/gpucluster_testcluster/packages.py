"""Getting the Slurm, munge and MariaDB binaries onto the machine."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from .proc import ClusterError, run

APT_PACKAGES = (
    "slurmctld",
    "slurmd",
    "slurm-client",
    "munge",
    "slurmdbd",
    "mariadb-server",
)

CORE_BINARIES = ("slurmctld", "slurmd", "slurmstepd", "sinfo", "srun", "scontrol", "munged")
ACCOUNTING_BINARIES = ("slurmdbd", "mariadbd", "mariadb-install-db", "mariadb", "sacctmgr")

# Debian ships the daemons as *-wlm and points these names at them through
# update-alternatives, which a plain `dpkg -x` never runs.
WLM_LINKS = ("slurmctld", "slurmd", "slurmstepd")

# Where the daemons and tools live; root's PATH under sudo/cron may lack sbin.
_SEARCH_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def which(name: str) -> str | None:
    return shutil.which(name, path=_SEARCH_PATH + ":" + os.environ.get("PATH", ""))


def missing(binaries: tuple[str, ...]) -> list[str]:
    return [b for b in binaries if which(b) is None]


def have_accounting_binaries() -> bool:
    return not missing(ACCOUNTING_BINARIES)


def ensure_installed(*, want_accounting: bool, log: bool = True) -> None:
    """apt-get install what is missing; CI machines start without Slurm."""
    needed = CORE_BINARIES + (ACCOUNTING_BINARIES if want_accounting else ())
    absent = missing(needed)
    if not absent:
        return
    if which("apt-get") is None:
        raise ClusterError(
            f"missing {', '.join(absent)} and no apt-get here; use --debs DIR (see tools/fetch-gpu-debs)"
        )
    if log:
        print(f"installing Slurm packages (missing: {', '.join(absent)})", file=sys.stderr)
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    argv = ["apt-get", "install", "-y", "--no-install-recommends", *APT_PACKAGES]
    first = run(argv, timeout=900, check=False, env=env)
    if first.returncode != 0:
        # Package lists are often absent on fresh CI images; refreshing them
        # costs time, so only when the plain install did not work.
        run(["apt-get", "update"], timeout=600, env=env)
        run(argv, timeout=900, env=env)
    still = missing(needed)
    if still:
        raise ClusterError(f"still missing after apt-get install: {', '.join(still)}")


def install_debs(deb_dir: Path, *, root: Path = Path("/"), log: bool = True) -> list[Path]:
    """Unpack Debian .debs and add only the files the system lacks.

    Meant for the GPU machine (another distribution, no registry): its own
    libraries must never be replaced, so existing paths are skipped. Returns
    the paths that were created. ``root`` other than ``/`` is for trying it out.
    """
    debs = sorted(deb_dir.glob("*.deb"))
    if not debs:
        raise ClusterError(f"no .deb files in {deb_dir}")
    if which("dpkg") is None:
        raise ClusterError("dpkg is needed to unpack .debs")
    created: list[Path] = []
    with tempfile.TemporaryDirectory(prefix="gpucluster-debs-") as tmp:
        staging = Path(tmp)
        for deb in debs:
            run(["dpkg", "-x", deb, staging], timeout=120)
        for cur, dirs, files in os.walk(staging):
            rel_root = Path(cur).relative_to(staging)
            for name in sorted(dirs):
                src = Path(cur) / name
                # Symlinked directories are entries to copy, not to descend into.
                if src.is_symlink():
                    files.append(name)
            dirs[:] = [d for d in dirs if not (Path(cur) / d).is_symlink()]
            for name in files:
                src = Path(cur) / name
                dst = root / rel_root / name
                if os.path.lexists(dst):
                    continue
                dst.parent.mkdir(parents=True, exist_ok=True)
                if src.is_symlink():
                    os.symlink(os.readlink(src), dst)
                else:
                    shutil.copy2(src, dst)
                created.append(dst)
    for name in WLM_LINKS:
        link = root / "usr/sbin" / name
        target = root / "usr/sbin" / f"{name}-wlm"
        if not os.path.lexists(link) and target.exists():
            link.symlink_to(target.name)
            created.append(link)
    if log:
        print(f"installed {len(created)} files from {len(debs)} .debs", file=sys.stderr)
    if root == Path("/"):
        run(["ldconfig"], timeout=120)
        _check_loadable()
    return created


def _check_loadable() -> None:
    """Fail early, with the missing library named, if a daemon cannot load (``ip`` is only
    needed for network namespaces; --network host does without it)."""
    for name in ("slurmd", "slurmctld", "munged", "ip"):
        path = which(name)
        if path is None:
            if name == "ip":
                continue
            raise ClusterError(f"{name} not found after unpacking .debs")
        try:
            out = subprocess.run(["ldd", path], capture_output=True, text=True, timeout=30, check=False).stdout
        except (OSError, subprocess.TimeoutExpired):
            continue
        absent = [line.split()[0] for line in out.splitlines() if "not found" in line]
        if absent and name == "ip":
            print(
                f"warning: ip needs libraries this machine lacks ({', '.join(absent)}); only --network host will work",
                file=sys.stderr,
            )
        elif absent:
            raise ClusterError(f"{name} needs libraries this machine lacks: {', '.join(absent)}")

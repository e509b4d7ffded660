"""Starting and stopping munged, MariaDB, slurmdbd, slurmctld and slurmd."""

from __future__ import annotations

import os
import pwd
import socket
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from . import config, packages
from .config import Paths
from .proc import ClusterError, alive_from_pid_file, run, terminate, wait_for

START_TIMEOUT = 60.0
STOP_GRACE = 5.0

# Run inside the node's fresh namespaces: hide the other nodes' GPUs, set the host name, then
# become slurmd. Python rather than `sh -c` so no shell ever parses an argument.
NODE_EXEC = Path(__file__).with_name("nodeexec.py")


def _binary(name: str) -> str:
    path = packages.which(name)
    if path is None:
        raise ClusterError(f"{name} not found")
    return path


def slurm_env(paths: Paths) -> dict[str, str]:
    return {**os.environ, "SLURM_CONF": str(paths.slurm_conf)}


def launch(
    argv: Sequence[str | os.PathLike[str]],
    log_file: Path,
    *,
    env: Mapping[str, str] | None = None,
    timeout: float = 30.0,
) -> None:
    """Run a command that daemonizes itself; its own output goes to ``log_file``.

    Output goes to a file, not a pipe: a daemon that keeps the inherited
    descriptors open would otherwise block the read until the timeout.
    """
    args = [os.fspath(a) for a in argv]
    log_file.parent.mkdir(parents=True, exist_ok=True)
    with open(log_file, "ab") as out:
        try:
            proc = subprocess.run(
                args,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=dict(env) if env is not None else None,
                timeout=timeout,
                check=False,
            )
        except subprocess.TimeoutExpired as exc:
            raise ClusterError(f"timed out starting {args[0]} (see {log_file})") from exc
    if proc.returncode != 0:
        raise ClusterError(f"{' '.join(args)} exited {proc.returncode}; see {log_file}")


def _wait_pid(pid_file: Path, expected: str, log_hint: Path, timeout: float) -> int:
    try:
        wait_for(
            f"{expected} (pid file {pid_file})",
            lambda: alive_from_pid_file(pid_file, expected) is not None,
            timeout,
        )
    except ClusterError as exc:
        raise ClusterError(f"{exc}; see {log_hint}") from None
    pid = alive_from_pid_file(pid_file, expected)
    assert pid is not None
    return pid


def _port_open(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def stop_pid_file(pid_file: Path, expected: str, grace: float = STOP_GRACE) -> bool:
    """Stop the daemon named by ``pid_file`` if it is ours; True if one ran."""
    pid = alive_from_pid_file(pid_file, expected)
    if pid is not None:
        terminate([pid], grace=grace)
    pid_file.unlink(missing_ok=True)
    return pid is not None


# --- munge -----------------------------------------------------------------


def start_munge(paths: Paths) -> None:
    # munged refuses keys and sockets in directories others can write to.
    paths.munge_dir.mkdir(mode=0o755, parents=True, exist_ok=True)
    os.chmod(paths.munge_dir, 0o755)
    paths.munge_key.unlink(missing_ok=True)
    fd = os.open(paths.munge_key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o400)
    with os.fdopen(fd, "wb") as fh:
        fh.write(os.urandom(1024))
    log = paths.log / "munged.log"
    launch(
        [
            _binary("munged"),
            # Runs as root here: no munge user on the GPU machine.
            "--force",
            f"--key-file={paths.munge_key}",
            f"--socket={paths.munge_socket}",
            f"--pid-file={paths.munge_pid}",
            f"--log-file={log}",
            f"--seed-file={paths.munge_dir / 'munged.seed'}",
        ],
        paths.log / "munged.out",
    )
    _wait_pid(paths.munge_pid, "munged", log, START_TIMEOUT)
    wait_for("munge socket", paths.munge_socket.exists, START_TIMEOUT)


# --- MariaDB ---------------------------------------------------------------


def _mysql_account() -> tuple[str, int, int]:
    try:
        pw = pwd.getpwnam("mysql")
    except KeyError:
        return ("root", 0, 0)
    return (pw.pw_name, pw.pw_uid, pw.pw_gid)


def start_mariadb(paths: Paths, storage_password: str) -> None:
    user, uid, gid = _mysql_account()
    for d in (paths.mysql_dir, paths.mysql_data, paths.mysql_run, paths.mysql_log_dir):
        d.mkdir(mode=0o750, parents=True, exist_ok=True)
        # mariadbd exits without a word if it cannot write here.
        os.chown(d, uid, gid)
    if not (paths.mysql_data / "mysql").exists():
        run(
            [
                _binary("mariadb-install-db"),
                "--no-defaults",
                f"--datadir={paths.mysql_data}",
                f"--user={user}",
                "--auth-root-authentication-method=socket",
                "--skip-test-db",
            ],
            timeout=300,
        )
    launch(
        [
            _binary("setsid"),
            # mariadbd does not daemonize; a detached session keeps it out of
            # our process group and avoids a child we would have to reap.
            "--fork",
            _binary("mariadbd"),
            "--no-defaults",
            f"--datadir={paths.mysql_data}",
            f"--socket={paths.mysql_socket}",
            f"--pid-file={paths.mysql_pid}",
            f"--log-error={paths.mysql_log}",
            f"--port={config.MARIADB_PORT}",
            "--bind-address=127.0.0.1",
            "--skip-name-resolve",
            f"--user={user}",
            # slurmdbd asks for a bigger pool and logs a harmless error about
            # it; small CI machines matter more than that line.
            "--innodb-buffer-pool-size=128M",
            "--innodb-lock-wait-timeout=900",
            "--skip-log-bin",
        ],
        paths.log / "mariadbd.out",
    )
    _wait_pid(paths.mysql_pid, "mariadbd", paths.mysql_log, START_TIMEOUT)
    wait_for("MariaDB socket", paths.mysql_socket.exists, START_TIMEOUT)
    run(
        [
            _binary("mariadb"),
            "--no-defaults",
            f"--socket={paths.mysql_socket}",
            "--user=root",
        ],
        input_text=config.render_mariadb_setup_sql(storage_password),
        timeout=60,
    )


def stop_mariadb(paths: Paths) -> bool:
    # InnoDB shutdown can take a few seconds; SIGKILL only as a last resort.
    return stop_pid_file(paths.mysql_pid, "mariadbd", grace=30.0)


# --- slurmdbd / slurmctld / slurmd -------------------------------------------


def start_slurmdbd(paths: Paths) -> None:
    launch([_binary("slurmdbd")], paths.log / "slurmdbd.out", env=slurm_env(paths))
    _wait_pid(paths.slurmdbd_pid, "slurmdbd", paths.log / "slurmdbd.log", START_TIMEOUT)
    wait_for("slurmdbd port", lambda: _port_open(config.SLURMDBD_PORT), START_TIMEOUT)


def register_cluster(paths: Paths) -> None:
    """Make sure the accounting database knows the cluster, so sacct works."""
    env = slurm_env(paths)
    sacctmgr = _binary("sacctmgr")
    listed = run([sacctmgr, "-n", "-P", "list", "cluster", "format=cluster"], env=env, timeout=30)
    if config.CLUSTER_NAME in listed.stdout.split():
        return
    run([sacctmgr, "-i", "add", "cluster", config.CLUSTER_NAME], env=env, timeout=30)


def start_slurmctld(paths: Paths) -> None:
    env = slurm_env(paths)
    launch(
        [_binary("slurmctld"), "-f", paths.slurm_conf],
        paths.log / "slurmctld.out",
        env=env,
    )
    _wait_pid(paths.slurmctld_pid, "slurmctld", paths.log / "slurmctld.log", START_TIMEOUT)
    scontrol = _binary("scontrol")
    wait_for(
        "slurmctld to answer",
        lambda: run([scontrol, "ping"], env=env, check=False, timeout=15).returncode == 0,
        START_TIMEOUT,
        interval=0.2,
    )


def start_slurmd(paths: Paths, node: str, network: config.Network = "netns", *, hide: Sequence[str] = ()) -> int:
    """Start one node's slurmd inside its network namespace (or the host's, with
    ``network="host"``) and fresh UTS and mount ones: its own hostname, and /dev/null mounted over
    the device files in ``hide`` (the other nodes' GPUs), which its jobs inherit."""
    config.validate_node_name(node)
    # Not `ip netns exec`: it remounts /sys, hides the cgroup fs, and slurmd
    # then fails to load its cgroup plugin.
    enter: list[str | os.PathLike[str]] = [_binary("nsenter"), f"--net=/run/netns/{node}"] if network == "netns" else []
    argv: list[str | os.PathLike[str]] = [
        *enter,
        _binary("unshare"),
        "--uts",
        # Private: the node's mounts stay out of the host and the host's later ones out of the node.
        "--mount",
        "--propagation",
        "private",
        sys.executable,
        "-I",
        NODE_EXEC,
        node,
        *hide,
        "--",
        _binary("slurmd"),
        "-N",
        node,
        "-f",
        paths.slurm_conf,
    ]
    paths.slurmd_pid(node).unlink(missing_ok=True)
    (paths.spool / f"slurmd-{node}").mkdir(mode=0o755, parents=True, exist_ok=True)
    launch(argv, paths.log / f"slurmd-{node}.out", env=slurm_env(paths))
    return _wait_pid(paths.slurmd_pid(node), "slurmd", paths.slurmd_log(node), START_TIMEOUT)


# --- cgroup v2 preparation (real GPU mode, no systemd) -----------------------

CGROUP_ROOT = Path("/sys/fs/cgroup")
_CONTROLLERS = ("cpuset", "cpu", "memory", "pids")


def cgroup_v2_unified() -> bool:
    return (CGROUP_ROOT / "cgroup.controllers").exists()


def prepare_cgroup_v2() -> list[str]:
    """Set up what systemd would, for slurmd's cgroup/v2 plugin.

    Returns the directories created, so teardown can remove exactly those.
    """
    created: list[str] = []
    system_slice = CGROUP_ROOT / "system.slice"
    if not system_slice.exists():
        system_slice.mkdir()
        created.append(str(system_slice))
    for d in (CGROUP_ROOT, system_slice):
        available = (d / "cgroup.controllers").read_text().split()
        for ctl in _CONTROLLERS:
            if ctl in available:
                try:
                    (d / "cgroup.subtree_control").write_text(f"+{ctl}")
                except OSError as exc:
                    raise ClusterError(f"cannot enable {ctl} in {d}: {exc}") from exc
    return created


def slurm_cgroup_dirs(nodes: Sequence[str]) -> list[str]:
    """Cgroup directories slurmd makes for our nodes (it never removes them).

    A multiple-slurmd build names them after the node, so a system Slurm's
    own directories are never among them.
    """
    found: list[str] = []
    for node in nodes:
        config.validate_node_name(node)
        found += [str(p) for p in CGROUP_ROOT.glob(f"*/slurm_{node}")]
        v2_scope = CGROUP_ROOT / "system.slice" / f"{node}_slurmstepd.scope"
        if v2_scope.exists():
            found.append(str(v2_scope))
    return found


def remove_cgroup_dirs(created: Sequence[str]) -> None:
    for top in created:
        top_path = Path(top)
        if not top_path.is_dir():
            continue
        # Slurm leaves its own scope directories below; cgroups can only be
        # removed bottom-up and only when empty of processes.
        for root, dirs, _files in os.walk(top_path, topdown=False):
            for d in dirs:
                try:
                    os.rmdir(Path(root) / d)
                except OSError:
                    pass
        try:
            os.rmdir(top_path)
        except OSError:
            pass

"""The storage area and the shared-filesystem checks on a network filesystem, each node its own
client: a GlusterFS volume served from the test cluster's controller address, mounted over FUSE
on the login node (this machine) and inside every node's slurmd mount and network namespace, so
that a write on node1 reaches node2 through node1's client, the bridge and the server, and node2's
client cache decides when it sees it. The ``ci`` profile's directory is one ext4 seen by every
node; this is where the visibility, lock and large-directory checks meet a client cache.

    flock /tmp/gpucluster-testcluster.lock python benchmarks/storage_network_fs.py --repeat 3 --keep /tmp/gfs
    ... --options negative-timeout=5          # every client caches a name's absence for 5 s
    ... --odd-node node2 --odd-options negative-timeout=5   # one client does

Needs root, the test cluster up, and Debian's ``glusterfs-server`` (it starts ``glusterd`` where
none runs and makes the volume where none is). Every mount it makes is undone at the end, also
on an error; the volume and its brick are kept for the next run (``--remove-volume`` removes
them). Prints one JSON line per run with the figures the checks judged, then a Markdown table.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from gpucluster_testcluster import TestCluster
from gpucluster_testcluster.config import CONTROLLER_ADDR, Paths
from gpucluster_testcluster.proc import alive_from_pid_file

REPO = Path(__file__).resolve().parents[1]
SLURM_CONF = "/var/lib/gpucluster-testcluster/etc/slurm.conf"
VOLUME = "gpucluster-bench"
BRICK = Path("/srv/gpucluster-gfs/brick")
MOUNT = Path("/srv/gpucluster-gfs/mnt")
SELECTION = ("tests/acceptance/test_storage.py", "tests/acceptance/test_sharedfs.py")


def sh(*argv: str, timeout_s: float = 60, check: bool = True) -> str:
    proc = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout_s, check=False)
    if check and proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} exited {proc.returncode}: {proc.stderr.strip() or proc.stdout.strip()}")
    return proc.stdout


def ensure_volume() -> None:
    """glusterd running and the volume started, served on the controller's bridge address."""
    if shutil.which("gluster") is None:
        raise SystemExit("GlusterFS is not installed (Debian: apt-get install glusterfs-server glusterfs-client)")
    if subprocess.run(["pgrep", "-x", "glusterd"], capture_output=True, check=False).returncode != 0:
        sh("glusterd")
        deadline = time.monotonic() + 30
        while subprocess.run(["gluster", "volume", "list"], capture_output=True, check=False).returncode != 0:
            if time.monotonic() > deadline:
                raise SystemExit("glusterd did not answer within 30 s")
            time.sleep(1)
    if VOLUME not in sh("gluster", "volume", "list").split():
        BRICK.mkdir(parents=True, exist_ok=True)
        # One brick on this machine's disk: `force` because it is on the root filesystem.
        sh("gluster", "--mode=script", "volume", "create", VOLUME, f"{CONTROLLER_ADDR}:{BRICK}", "force")
    if "Status: Started" not in sh("gluster", "volume", "info", VOLUME):
        sh("gluster", "--mode=script", "volume", "start", VOLUME)


def remove_volume() -> None:
    sh("gluster", "--mode=script", "volume", "stop", VOLUME, check=False)
    sh("gluster", "--mode=script", "volume", "delete", VOLUME, check=False)
    shutil.rmtree(BRICK.parent, ignore_errors=True)


def slurmd_pid(node: str) -> int:
    pid = alive_from_pid_file(Paths().slurmd_pid(node), "slurmd")
    if pid is None:
        raise SystemExit(f"{node}'s slurmd is not running; start the test cluster first")
    return pid


def in_node(node: str, *argv: str, check: bool = True) -> str:
    """Run ``argv`` in the mount and network namespaces of ``node``'s slurmd (its jobs' own)."""
    return sh("nsenter", "-t", str(slurmd_pid(node)), "-m", "-n", *argv, check=check)


@contextmanager
def mounted(nodes: list[str], options: str = "", odd: dict[str, str] | None = None) -> Iterator[None]:
    """The volume on MOUNT here and on every node, each its own FUSE client (``options`` for
    every node's mount, ``odd``: node → its own options instead); unmounted after."""
    MOUNT.mkdir(parents=True, exist_ok=True)
    source = f"{CONTROLLER_ADDR}:/{VOLUME}"
    done: list[str | None] = []
    try:
        sh("mount", "-t", "glusterfs", source, str(MOUNT))
        done.append(None)
        os.chmod(MOUNT, 0o1777)
        for node in nodes:
            opts = (odd or {}).get(node, options)
            in_node(node, "mount", "-t", "glusterfs", *(["-o", opts] if opts else []), source, str(MOUNT))
            done.append(node)
        yield
    finally:
        for node in reversed(done):
            if node is None:
                sh("umount", str(MOUNT), check=False)
            else:
                in_node(node, "umount", str(MOUNT), check=False)


def profile_file(nodes: list[str]) -> Path:
    text = (REPO / "thresholds.toml").read_text()
    listed = ", ".join(f'"{n}"' for n in nodes)
    text += (
        f'\n[profiles.gfs]\nextends = "ci"\nnodes = {len(nodes)}\nnodelist = [{listed}]\n'
        f'shared_fs = "{MOUNT}"\n'
        "[profiles.gfs.storage]\n"
        'file_bytes = "128MiB"\nblock_bytes = "4MiB"\nmetadata_files = 500\nlarge_dir_files = 2000\n'
        "checkpoint_ranks_per_node = 1\nvisibility_tries = 20\nvisibility_timeout_s = 5.0\n"
        "import_timeout_s = 120.0\n"
    )
    path = Path(tempfile.mkdtemp(prefix="gfs-bench-")) / "thresholds.toml"
    path.write_text(text)
    return path


def figures(doc: dict[str, Any]) -> dict[str, Any]:
    """What the storage and shared-filesystem checks measured and decided, from the results file."""
    tests = {t["nodeid"].split("::")[-1]: t for t in doc.get("tests", [])}
    out: dict[str, Any] = {
        "verdict": doc.get("acceptance", {}).get("verdict", "no results"),
        "checks": {name: t["verdict"] for name, t in sorted(tests.items())},
    }
    streams = tests.get("test_write_and_read_throughput", {}).get("storage", {}).get("nodes", {})
    trips = [ms for facts in streams.values() for ms in facts.get("round_trips_ms", [])]
    out["nodes"] = {
        node: {
            "tool": facts.get("tool"),
            "mode": facts.get("mode"),
            "mount": facts.get("mount"),
            "write_mb_s": facts.get("write_mb_s"),
            "read_mb_s": facts.get("read_mb_s"),
            "metadata_ops_s": facts.get("metadata_ops_s"),
            "import_s": facts.get("import_s"),
            "large_dir_listed": facts.get("large_dir_listed"),
            "large_dir_list_s": facts.get("large_dir_list_s"),
        }
        for node, facts in sorted(streams.items())
    }
    if trips:
        trips.sort()
        out["round_trip_ms"] = {
            "n": len(trips),
            "median": round(statistics.median(trips), 1),
            "p90": round(trips[int(0.9 * (len(trips) - 1))], 1),
            "max": round(trips[-1], 1),
        }
    checkpoint = tests.get("test_checkpoint_restores_bit_for_bit", {}).get("storage", {}).get("checkpoint", {})
    if checkpoint:
        out["checkpoint"] = {
            "bit_for_bit": checkpoint.get("bit_for_bit"),
            "save_gb_s": checkpoint.get("save", {}).get("gb_s"),
            "restore_gb_s": checkpoint.get("restore", {}).get("gb_s"),
        }
    out["not_passed"] = {
        name: (t.get("message") or "")[:300] for name, t in tests.items() if t["verdict"] not in ("pass", "warn")
    }
    return out


def run(path: Path, keep: Path | None, repeat: int, timeout_s: float) -> dict[str, Any]:
    results = path.parent / f"results-{repeat}.json"
    argv = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", f"--gpucluster-thresholds={path}"]
    argv += ["--cluster=gfs", f"--gpucluster-results={results}", *SELECTION]
    started = time.monotonic()
    proc = subprocess.run(
        argv,
        cwd=REPO,
        env={**os.environ, "SLURM_CONF": SLURM_CONF},
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )
    wall = time.monotonic() - started
    doc = json.loads(results.read_text()) if results.exists() else {}
    if keep is not None:
        keep.mkdir(parents=True, exist_ok=True)
        (keep / f"results-{repeat}.json").write_text(json.dumps(doc, indent=1))
        (keep / f"output-{repeat}.txt").write_text(proc.stdout + proc.stderr)
    return {"repeat": repeat, "wall_s": round(wall, 1), "returncode": proc.returncode, **figures(doc)}


def table(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| run | wall | verdict | node | write / read MB/s | metadata ops/s | round trip ms (median, p90, max) "
        "| checkpoint save / restore GB/s | not passed |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        trip = r.get("round_trip_ms", {})
        trip_text = f"{trip.get('median')}, {trip.get('p90')}, {trip.get('max')}" if trip else ""
        ck = r.get("checkpoint", {})
        ck_text = f"{ck.get('save_gb_s')} / {ck.get('restore_gb_s')}" if ck else ""
        for i, (node, f) in enumerate(r["nodes"].items() or [("", {})]):
            head = f"| {r['repeat']} | {r['wall_s']} s | {r['verdict']} |" if i == 0 else "| | | |"
            tail = f" {trip_text} | {ck_text} | {', '.join(r['not_passed']) or 'none'} |" if i == 0 else " | | |"
            lines.append(
                f"{head} {node} | {f.get('write_mb_s')} / {f.get('read_mb_s')} | {f.get('metadata_ops_s')} |" + tail
            )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", nargs="+", default=["node1", "node2"], help="the nodes to test")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--timeout", type=float, default=900.0, help="bound on each pytest process (s)")
    parser.add_argument("--keep", type=Path, help="keep each run's results file and output in this folder")
    parser.add_argument("--remove-volume", action="store_true", help="remove the volume and its brick at the end")
    parser.add_argument("--options", default="", help="every node's mount options (mount.glusterfs -o)")
    parser.add_argument("--odd-node", help="a node mounting with --odd-options instead")
    parser.add_argument("--odd-options", default="", help="that node's mount options")
    args = parser.parse_args()
    if TestCluster.from_running() is None:
        raise SystemExit("the test cluster is not up: python -m gpucluster_testcluster up")
    ensure_volume()
    path = profile_file(args.nodes)
    rows = []
    try:
        odd = {args.odd_node: args.odd_options} if args.odd_node else None
        with mounted(args.nodes, args.options, odd):
            for repeat in range(1, args.repeat + 1):
                row = run(path, args.keep, repeat, args.timeout)
                print(json.dumps(row), flush=True)
                rows.append(row)
    finally:
        if args.remove_volume:
            remove_volume()
    print(table(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

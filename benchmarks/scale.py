"""The harness at 2 to 64 simulated nodes of 8 GPUs: what it costs the login node as the node count grows.

For each node count N it brings up the project's Slurm test cluster with N nodes (host network, fake
GRES ``gpu:8``, 8 CPUs per node), runs the checks that need no real GPU (Slurm health, placement with
8 tasks per node, shared filesystem, inventory, rank failure) through pytest with a profile copied
from ``--base`` (default ``ci``) at ``nodes = N``, ``gpus_per_node = 8``, then plans the GPU checks
(NCCL, training, compute) with ``--gpucluster-dry-run`` (with ``--run-gpu-checks`` it also runs them, on CPU
stand-ins: only meaningful on a machine with a core per simulated GPU), and tears the cluster down.
Per N it prints one JSON line: wall time and the harness split from the results' ``timing``, the
pytest process's peak RSS (``/usr/bin/time``), the results JSON and HTML report sizes, the report's
render time in headless Chromium (when installed), the Slurm commands the run issued (counted by a
directory of small wrappers put first on PATH that log each call and exec the real command), the
RPCs slurmctld served meanwhile (``sdiag`` before and after), the pytest process's CPU time, the
machine's load average before and after, and the dry run's wall time. ``--per-leaf K`` gives the
profile a topology.conf of leaves of K nodes under one spine, so the dry run plans the rounds.

The test cluster is shared by everything on the machine: run it under its lock.

    flock /tmp/gpucluster-testcluster.lock timeout 3000 python benchmarks/scale.py --nodes 2 8 16 32 64
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from collections import Counter
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
NO_GPU_TESTS = [
    "tests/acceptance/test_slurm_health.py",
    "tests/acceptance/test_placement.py",
    "tests/acceptance/test_sharedfs.py",
    "tests/acceptance/test_inventory.py",
    "tests/acceptance/test_rank_failure.py",
]
GPU_TESTS = [
    "tests/acceptance/test_nccl.py",
    "tests/acceptance/test_training.py",
    "tests/acceptance/test_compute.py",
]
SLURM_COMMANDS = ("sbatch", "squeue", "sacct", "scontrol", "sinfo", "scancel", "srun", "salloc")
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def write_shims(folder: Path, log: Path) -> None:
    """One wrapper per Slurm command: append the host it runs on, its name and its arguments to
    ``log``, then exec the real one. Jobs inherit PATH, so calls on the nodes are logged too; each
    node's slurmd has the node's host name, which tells them from the login process's."""
    folder.mkdir(parents=True, exist_ok=True)
    for name in SLURM_COMMANDS:
        real = shutil.which(name)
        if real is None:
            continue
        shim = folder / name
        shim.write_text(f'#!/bin/sh\necho "$(uname -n) {name} $*" >> "{log}"\nexec "{real}" "$@"\n')
        shim.chmod(0o755)


def count_commands(log: Path, login: str) -> tuple[dict[str, int], int]:
    """Calls per Slurm command made on the host ``login`` (``scontrol show job`` etc. kept apart),
    and the number made on the nodes, from the wrappers' log."""
    if not log.exists():
        return {}, 0
    counts: Counter[str] = Counter()
    on_nodes = 0
    for line in log.read_text().splitlines():
        host, *words = line.split()
        if not words:
            continue
        if host != login:
            on_nodes += 1
            continue
        key = words[0]
        if key == "scontrol" and len(words) > 1:
            key = " ".join(w for w in words[:3] if not w.startswith("-"))
        counts[key] += 1
    return dict(sorted(counts.items())), on_nodes


def profile_text(base: str, nodes: int, gpus_per_node: int, topology_file: Path | None = None) -> str:
    tree = f'topology_file = "{topology_file}"\n' if topology_file is not None else ""
    return (
        f'\n[profiles.scale{nodes}]\nextends = "{base}"\nnodes = {nodes}\ngpus_per_node = {gpus_per_node}\n'
        f'description = "{base} at {nodes} nodes of {gpus_per_node} GPUs"\n{tree}'
    )


def topology_conf(nodes: int, per_leaf: int) -> str:
    """Slurm's topology.conf syntax: the test cluster's node1..nodeN under leaves of ``per_leaf``
    nodes, every leaf under one spine."""
    leaves = -(-nodes // per_leaf)
    out = [f"# {nodes} nodes, leaves of {per_leaf}"]
    for i in range(leaves):
        first, last = i * per_leaf + 1, min((i + 1) * per_leaf, nodes)
        out.append(f"SwitchName=leaf{i + 1} Nodes=node[{first}-{last}]")
    out.append(f"SwitchName=spine Switches=leaf[1-{leaves}]")
    return "\n".join(out) + "\n"


SDIAG_RPC = re.compile(r"^\s*(\S+)\s+\(\s*\d+\)\s+count:(\d+)")


def sdiag_counts(env: dict[str, str]) -> Counter[str]:
    """slurmctld's RPC counts by message type since its start (``sdiag``'s first RPC table; the
    table by user repeats the same calls)."""
    proc = subprocess.run(["sdiag"], env=env, capture_output=True, text=True, timeout=60, check=False)
    counts: Counter[str] = Counter()
    section = 0
    for line in proc.stdout.splitlines():
        if line.startswith("Remote Procedure Call statistics"):
            section += 1
            continue
        if section == 1 and (m := SDIAG_RPC.match(line)):
            counts[m.group(1)] = int(m.group(2))
    return counts


def rpc_delta(before: Counter[str], after: Counter[str]) -> dict[str, Any]:
    diff = after - before
    return {"total": sum(diff.values()), "by_type": dict(diff.most_common(8))}


def load_average() -> list[float]:
    return [round(x, 1) for x in os.getloadavg()]


def render_s(html: Path, work: Path) -> float | None:
    """Seconds headless Chromium takes to load the report and run its scripts (``--dump-dom``)."""
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None or not html.exists():
        return None
    argv = [chromium, *CHROMIUM_FLAGS, f"--user-data-dir={work / 'chromium'}", "--dump-dom", html.as_uri()]
    # The first start pays for the profile directory: warm it on a blank page.
    subprocess.run([*argv[:-1], "about:blank"], capture_output=True, timeout=120, check=False)
    t0 = time.monotonic()
    proc = subprocess.run(argv, capture_output=True, timeout=120, check=False)
    return round(time.monotonic() - t0, 2) if proc.returncode == 0 else None


def job_start_ups(doc: dict[str, Any]) -> list[list[Any]]:
    """Each job's task start-up from the results: [name without the run's prefix, tasks, median
    wall s, slowest wall s, median CPU s], so that the wall a task waited at N nodes can be set
    against the CPU its start-up takes (the same at every N)."""
    seen: dict[str, list[Any]] = {}
    for test in doc.get("tests", []):
        for job in test.get("jobs", []):
            s = job.get("start_up") or {}
            if s and job["job_id"] not in seen:
                name = str(job.get("name", "")).split("-", 1)[-1]
                seen[job["job_id"]] = [name, s["tasks"], s["wall_median_s"], s["wall_max_s"], s["cpu_median_s"]]
    return list(seen.values())


def run_pytest(
    argv: list[str], env: dict[str, str], work: Path, tag: str, timeout_s: float
) -> tuple[subprocess.CompletedProcess[str], float, int | None]:
    """pytest under ``/usr/bin/time``: the process, its wall time and its peak RSS (KiB); its user
    and system CPU seconds go to ``tag.rss`` beside the RSS (``cpu_s`` reads them)."""
    rss_file = work / f"{tag}.rss"
    timer = ["/usr/bin/time", "-f", "%U %S %M", "-o", str(rss_file)] if Path("/usr/bin/time").exists() else []
    t0 = time.monotonic()
    proc = subprocess.run(
        [*timer, sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", *argv],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )
    wall = time.monotonic() - t0
    rss = int(rss_file.read_text().split()[-1]) if rss_file.exists() and rss_file.read_text().strip() else None
    return proc, wall, rss


def cpu_s(work: Path, tag: str) -> float | None:
    """User + system CPU seconds of the pytest process and the children it waited for."""
    rss_file = work / f"{tag}.rss"
    words = rss_file.read_text().split() if rss_file.exists() else []
    try:
        return round(float(words[-3]) + float(words[-2]), 1)
    except (IndexError, ValueError):
        return None


def measure(nodes: int, args: argparse.Namespace, work: Path) -> dict[str, Any]:
    """Bring up N nodes, run the no-GPU checks and the GPU checks' dry run, tear down."""
    tc = [sys.executable, "-m", "gpucluster_testcluster"]
    shape = ["--nodes", str(nodes), "--gpus-per-node", str(args.gpus_per_node), "--cpus-per-node"]
    # A CPU per simulated GPU, and at least 2: CPU stand-ins run 2 ranks per node whatever the GPUs.
    shape += [str(max(2, args.gpus_per_node)), "--network", "host", "--no-install", "--timeout", "120"]
    t0 = time.monotonic()
    up = subprocess.run([*tc, "up", *shape], capture_output=True, text=True, timeout=300, check=False)
    up_s = time.monotonic() - t0
    row: dict[str, Any] = {"nodes": nodes, "cluster_up_s": round(up_s, 1)}
    if up.returncode != 0:
        row["error"] = f"test cluster up failed: {up.stderr.strip()[-500:]}"
        return row
    try:
        thresholds = work / "thresholds.toml"
        base = (REPO / "thresholds.toml").read_text()
        tree = None
        if args.per_leaf:
            tree = work / f"topology-{nodes}.conf"
            tree.write_text(topology_conf(nodes, args.per_leaf))
        thresholds.write_text(base + profile_text(args.base, nodes, args.gpus_per_node, tree))
        slurm_env = {**os.environ, "SLURM_CONF": slurm_conf(args.base)}
        rpcs_before = sdiag_counts(slurm_env)
        load_before = load_average()
        log = work / f"slurm-{nodes}.log"
        shims = work / "shims"
        write_shims(shims, log)
        env = {**os.environ, "PATH": f"{shims}:{os.environ['PATH']}"}
        results = work / f"results-{nodes}.json"
        html = work / f"report-{nodes}.html"
        common = [f"--cluster=scale{nodes}", f"--gpucluster-thresholds={thresholds}"]
        proc, wall, rss = run_pytest(
            [*common, f"--gpucluster-results={results}", f"--html={html}", "--self-contained-html", *NO_GPU_TESTS],
            env,
            work,
            f"run-{nodes}",
            args.timeout,
        )
        load_after = load_average()
        rpcs = rpc_delta(rpcs_before, sdiag_counts(slurm_env))
        doc = json.loads(results.read_text()) if results.exists() else {"tests": []}
        outcomes = Counter(str(t["outcome"]) for t in doc["tests"])
        timing = doc.get("timing") or {}
        slurm, on_nodes = count_commands(log, os.uname().nodename)
        row.update(
            {
                "returncode": proc.returncode,
                "outcomes": dict(outcomes),
                "wall_s": round(wall, 1),
                "timing": {k: timing.get(k) for k in ("wall_s", "workload_s", "harness_s", "harness_parts", "jobs")},
                "start_up": job_start_ups(doc),
                "peak_rss_mib": round(rss / 1024, 1) if rss else None,
                "cpu_s": cpu_s(work, f"run-{nodes}"),
                "load_average": {"before": load_before, "after": load_after},
                "slurmctld_rpcs": rpcs,
                "results_bytes": results.stat().st_size if results.exists() else None,
                "html_bytes": html.stat().st_size if html.exists() else None,
                "html_render_s": render_s(html, work),
                "slurm_commands": sum(slurm.values()),
                "slurm_by_command": slurm,
                "slurm_commands_on_nodes": on_nodes,
            }
        )
        if proc.returncode != 0 and args.verbose:
            print(proc.stdout[-4000:], file=sys.stderr)
        if args.run_gpu_checks:
            # The GPU checks run, not only planned: on CPU stand-ins, so only meaningful where the
            # machine has a core per simulated GPU (the same per-node work at every N).
            gpu_results = work / f"results-gpu-{nodes}.json"
            gpu, gpu_wall, gpu_rss = run_pytest(
                [*common, f"--gpucluster-results={gpu_results}", *GPU_TESTS], env, work, f"gpu-{nodes}", args.timeout
            )
            gdoc = json.loads(gpu_results.read_text()) if gpu_results.exists() else {"tests": []}
            gtiming = gdoc.get("timing") or {}
            row["gpu_checks"] = {
                "returncode": gpu.returncode,
                "verdict": (gdoc.get("acceptance") or {}).get("verdict"),
                "outcomes": dict(Counter(str(t["outcome"]) for t in gdoc["tests"])),
                "wall_s": round(gpu_wall, 1),
                "timing": {k: gtiming.get(k) for k in ("wall_s", "workload_s", "harness_s", "harness_parts", "jobs")},
                "start_up": job_start_ups(gdoc),
                "peak_rss_mib": round(gpu_rss / 1024, 1) if gpu_rss else None,
            }
            if gpu.returncode != 0 and args.verbose:
                print(gpu.stdout[-4000:], file=sys.stderr)
        dry_log = work / f"slurm-dry-{nodes}.log"
        write_shims(shims, dry_log)
        dry, dry_wall, dry_rss = run_pytest(
            [*common, "--gpucluster-dry-run", *GPU_TESTS], env, work, f"dry-{nodes}", 300
        )
        row["dry_run"] = {
            "returncode": dry.returncode,
            "wall_s": round(dry_wall, 1),
            "cpu_s": cpu_s(work, f"dry-{nodes}"),
            "load_average": load_average(),
            "fabric": [ln.strip() for ln in dry.stdout.splitlines() if ln.lstrip().startswith(("fabric", "round"))],
            "peak_rss_mib": round(dry_rss / 1024, 1) if dry_rss else None,
            "output_lines": len(dry.stdout.splitlines()),
            "planned_jobs": next(
                (int(m.group(1)) for m in re.finditer(r"gpucluster plan: (\d+) job", dry.stdout)), None
            ),
            "slurm_commands": sum(count_commands(dry_log, os.uname().nodename)[0].values()),
        }
    finally:
        t0 = time.monotonic()
        subprocess.run([*tc, "down", "--no-install"], capture_output=True, text=True, timeout=300, check=False)
        row["cluster_down_s"] = round(time.monotonic() - t0, 1)
    return row


def slurm_conf(base: str) -> str:
    """The slurm.conf the base profile names (the test cluster's), for ``sdiag``."""
    profiles = tomllib.loads((REPO / "thresholds.toml").read_text())["profiles"]
    return str(profiles[base].get("slurm_conf") or os.environ.get("SLURM_CONF", "/etc/slurm/slurm.conf"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[2, 8, 16, 32, 64])
    parser.add_argument("--gpus-per-node", type=int, default=8)
    parser.add_argument("--base", default="ci", help="the profile the benchmark's profiles extend")
    parser.add_argument("--timeout", type=float, default=900, help="seconds one pytest run may take")
    parser.add_argument("--keep", type=Path, help="keep results, reports and Slurm command logs here")
    parser.add_argument("--per-leaf", type=int, default=0, help="a topology.conf of leaves of this many nodes")
    parser.add_argument("--verbose", action="store_true", help="print a failing run's output to stderr")
    parser.add_argument(
        "--run-gpu-checks",
        action="store_true",
        help="also run the NCCL, training and compute checks (CPU stand-ins; needs a core per simulated GPU)",
    )
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="gpucluster-scale-") as tmp:
        work = args.keep or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        for nodes in args.nodes:
            print(json.dumps(measure(nodes, args, work)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""What one bad node costs a whole run: the suite on two nodes of the project's Slurm test
cluster, clean and with one node faulty, and the per-node verdicts each run gives.

Scenarios (the faulty node is ``--fault-node``, node2 by default):

- ``clean``: nothing wrong;
- ``drained``: the node drained before the run (``scontrol update state=drain``);
- ``killed-before``: its slurmd and processes killed before the run;
- ``killed-10s``: the same, 10 s into the run;
- ``eight-gpus``: a profile expecting 8 GPUs per node on nodes that have 4 (both nodes fail).

Each run is a real pytest process on a profile that extends ``--base`` (the ``ci`` profile by
default) pinned to the two nodes; after it the node's slurmd is restarted and the node resumed.
Prints one JSON line per run and, at the end, a Markdown table: wall time, what it cost over the
clean run against the profile's ``queue_timeout_s``, the run's verdict, the per-node summary and
each node's verdict with its first reason.

    flock /tmp/gpucluster-testcluster.lock python benchmarks/faults.py --nodes node1 node2

``--repeat N`` runs the scenarios N times in turn (a verdict that depends on the machine's noise
shows as rows that differ).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from gpucluster_testcluster import TestCluster
from pytest_gpucluster.config import load

REPO = Path(__file__).resolve().parents[1]
SLURM_CONF = "/var/lib/gpucluster-testcluster/etc/slurm.conf"
SCENARIOS = ("clean", "drained", "killed-before", "killed-10s", "eight-gpus")


def slurm(*argv: str) -> str:
    env = {**os.environ, "SLURM_CONF": SLURM_CONF}
    proc = subprocess.run(list(argv), env=env, capture_output=True, text=True, timeout=30, check=False)
    return proc.stdout


def cluster() -> TestCluster:
    found = TestCluster.from_running()
    if found is not None:
        return found
    record = json.loads(Path("/var/lib/gpucluster-testcluster/cluster.json").read_text())
    spec = record["spec"]
    return TestCluster(nodes=int(spec["nodes"]), gpus_per_node=int(spec["gpus_per_node"]), install=False)


def restore(node: str) -> None:
    """Restart the node's slurmd, resume it and wait (bounded) until it is idle and empty."""
    handle = cluster()
    handle.start_slurmd(node, wait=False)
    slurm("scontrol", "update", f"nodename={node}", "state=resume")
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        busy = slurm("squeue", "-h", "-w", node, "-o", "%i").split()
        if not busy and any(n.name == node and n.healthy for n in handle.node_states()):
            return
        time.sleep(1)
    raise SystemExit(f"{node} is not usable 120 s after the fault was undone; see `sinfo -N`")


def thresholds(base: str, nodes: list[str], gpus_per_node: int | None) -> tuple[Path, int]:
    """The repository's thresholds.toml plus a ``bench`` profile; its queue_timeout_s."""
    text = (REPO / "thresholds.toml").read_text()
    listed = ", ".join(f'"{n}"' for n in nodes)
    extra = f'\n[profiles.bench]\nextends = "{base}"\nnodes = {len(nodes)}\nnodelist = [{listed}]\n'
    if gpus_per_node is not None:
        extra += f"gpus_per_node = {gpus_per_node}\n"
    path = Path(tempfile.mkdtemp(prefix="faults-bench-")) / "thresholds.toml"
    path.write_text(text + extra)
    return path, load(path).profile("bench").queue_timeout_s


def run(
    scenario: str,
    base: str,
    nodes: list[str],
    fault: str,
    selection: list[str],
    timeout_s: float,
    keep: Path | None,
    repeat: int = 1,
) -> dict[str, Any]:
    path, queue_timeout_s = thresholds(base, nodes, 8 if scenario == "eight-gpus" else None)
    results = path.parent / "results.json"
    argv = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", f"--gpucluster-thresholds={path}"]
    argv += ["--cluster=bench", f"--gpucluster-results={results}", *selection]
    env = {**os.environ, "SLURM_CONF": SLURM_CONF}
    if scenario == "drained":
        slurm("scontrol", "update", f"nodename={fault}", "state=drain", "reason=faults benchmark")
    if scenario == "killed-before":
        cluster().kill_slurmd(fault, with_jobs=True)
    started = time.monotonic()
    try:
        with subprocess.Popen(
            argv, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        ) as proc:
            if scenario == "killed-10s":
                time.sleep(10)
                cluster().kill_slurmd(fault, with_jobs=True)
            try:
                output, _ = proc.communicate(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                proc.kill()
                output, _ = proc.communicate()
        wall = time.monotonic() - started
    finally:
        if scenario != "clean":
            restore(fault)
    doc = json.loads(results.read_text()) if results.exists() else {}
    if keep is not None:
        keep.mkdir(parents=True, exist_ok=True)
        name = scenario if repeat == 1 else f"{scenario}-{repeat}"
        (keep / f"{name}.json").write_text(json.dumps(doc, indent=1))
        (keep / f"{name}.out").write_text(output)
    acceptance = doc.get("acceptance", {})
    per_node = acceptance.get("nodes", {})
    return {
        "scenario": scenario,
        "repeat": repeat,
        "wall_s": round(wall, 1),
        "returncode": proc.returncode,
        "queue_timeout_s": queue_timeout_s,
        "verdict": acceptance.get("verdict", "no results"),
        "summary": per_node.get("summary", ""),
        "exclude": per_node.get("exclude", ""),
        "nodes": {
            n: {"verdict": v["verdict"], "first_reason": (v["reasons"] or [""])[0][:160]}
            for n, v in per_node.get("verdicts", {}).items()
        },
        "queue_timeouts": sum("still PENDING after" in (t.get("message") or "") for t in doc.get("tests", [])),
        "output_lines": output.count("\n"),
    }


def table(rows: list[dict[str, Any]]) -> str:
    clean = [r["wall_s"] for r in rows if r["scenario"] == "clean"]
    ref = statistics.median(clean) if clean else None
    lines = [
        "| scenario | wall | over clean | within one queue_timeout_s | verdict | per-node summary | node verdicts "
        "| exclude | queue timeouts |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        over = r["wall_s"] - ref if ref is not None else None
        within = "" if over is None or r["scenario"] == "clean" else ("yes" if over <= r["queue_timeout_s"] else "NO")
        over_text = "" if over is None or r["scenario"] == "clean" else f"{over:+.1f} s"
        nodes = ", ".join(f"{n} {v['verdict']}" for n, v in sorted(r["nodes"].items()))
        lines.append(
            f"| {r['scenario']} | {r['wall_s']:.1f} s | {over_text} | {within} | {r['verdict']} | "
            f"{r['summary']} | {nodes} | {r['exclude']} | {r['queue_timeouts']} |"
        )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", nargs=2, default=["node1", "node2"], help="the two nodes to test")
    parser.add_argument("--fault-node", default=None, help="the node to break (default: the second)")
    parser.add_argument("--base", default="ci", help="the profile the benchmark's profile extends")
    parser.add_argument("--scenarios", nargs="+", default=list(SCENARIOS), choices=SCENARIOS)
    parser.add_argument("--timeout", type=float, default=900.0, help="bound on each pytest process (s)")
    parser.add_argument("--repeat", type=int, default=1, help="run the scenarios this many times, in turn")
    parser.add_argument("--out", type=Path, help="also write the rows as JSON here")
    parser.add_argument("--keep", type=Path, help="keep each run's results file and output in this folder")
    parser.add_argument("selection", nargs="*", default=[], help="pytest arguments (default: the whole suite)")
    args = parser.parse_args()
    fault = args.fault_node or args.nodes[1]
    rows = []
    for repeat in range(1, args.repeat + 1):
        for scenario in args.scenarios:
            row = run(scenario, args.base, args.nodes, fault, args.selection, args.timeout, args.keep, repeat)
            print(json.dumps(row), flush=True)
            rows.append(row)
    if args.out:
        args.out.write_text(json.dumps(rows, indent=1) + "\n")
    print(table(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Per-node checks on 1 node against N nodes: one allocation serves every node, so the wall time
must not grow with the node count (target: N nodes within 1.2x of 1 node).

Writes a thresholds file with two profiles pinned to the given nodes (``scale1`` on the first
node, ``scaleN`` on all of them) on top of ``--base`` (default: the ``ci`` profile of the
repository's thresholds.toml), runs the per-node acceptance tests with each (a real pytest
process, as an operator would) and prints one JSON line per run and a last line with the medians,
the ratio, the jobs per run (from the results file) and the verdict.

On the project's Slurm test cluster (4 namespaced nodes):

    python benchmarks/per_node_scaling.py --nodes node1 node2 node3 node4

On the 4×H200 test machine (one node; the comparison is then 1 node against itself, which still
shows the per-node checks' wall time there):

    python benchmarks/per_node_scaling.py --base testbox --nodes node1
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
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
PER_NODE_TESTS = [
    "tests/acceptance/test_inventory.py",
    "tests/acceptance/test_gpu_health.py",
    "tests/acceptance/test_infiniband.py",
    "tests/acceptance/test_nccl.py::test_busbw_inside_node",
]


def _profile(name: str, base: str, nodes: list[str]) -> str:
    listed = ", ".join(f'"{n}"' for n in nodes)
    return f'\n[profiles.{name}]\nextends = "{base}"\nnodes = {len(nodes)}\nnodelist = [{listed}]\n'


def run_once(
    thresholds: Path, profile: str, tests: list[str], timeout_s: float, keep: Path | None = None
) -> dict[str, Any]:
    """One pytest process; wall time, outcomes and the jobs it submitted. With ``keep``, its
    results file is kept there (``<profile>-<n>.json``)."""
    with tempfile.TemporaryDirectory() as tmp:
        results = Path(tmp) / "results.json"
        argv = [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "-q",
            f"--cluster={profile}",
            f"--gpucluster-thresholds={thresholds}",
            f"--gpucluster-results={results}",
            *tests,
        ]
        t0 = time.monotonic()
        proc = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=timeout_s, check=False)
        wall = time.monotonic() - t0
        doc = json.loads(results.read_text()) if results.exists() else {"tests": []}
        if keep is not None and results.exists():
            keep.mkdir(parents=True, exist_ok=True)
            n = len(list(keep.glob(f"{profile}-*.json"))) + 1
            shutil.copy(results, keep / f"{profile}-{n}.json")
    outcomes: dict[str, int] = {}
    jobs: set[str] = set()
    for t in doc["tests"]:
        outcomes[t["outcome"]] = outcomes.get(t["outcome"], 0) + 1
        jobs.update(str(j) for j in t.get("job_ids", []))
    timing = doc.get("timing") or {}
    return {
        "profile": profile,
        "nodes": len(doc.get("nodes", [])),
        "wall_s": round(wall, 2),
        "returncode": proc.returncode,
        "outcomes": outcomes,
        "jobs": len(jobs),
        # the results file's split: the time workloads ran on the nodes, and the rest
        "workload_s": timing.get("workload_s"),
        "harness_s": timing.get("harness_s"),
    }


def main(argv: list[str] | None = None) -> int:
    """Run the comparison; exit 0 when the N-node run is within ``--max-ratio`` of the 1-node run."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", default="ci", help="profile to extend (default: ci)")
    parser.add_argument("--thresholds", default=str(REPO / "thresholds.toml"))
    parser.add_argument("--nodes", nargs="+", default=["node1", "node2", "node3", "node4"])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--max-ratio", type=float, default=1.2)
    parser.add_argument("--timeout", type=float, default=600.0, help="per pytest run, seconds")
    parser.add_argument("--keep", type=Path, default=None, help="folder to keep each run's results file in")
    parser.add_argument("tests", nargs="*", default=PER_NODE_TESTS)
    args = parser.parse_args(argv)
    many = f"scale{len(args.nodes)}"
    with tempfile.TemporaryDirectory() as tmp:
        thresholds = Path(tmp) / "thresholds.toml"
        thresholds.write_text(
            Path(args.thresholds).read_text()
            + _profile("scale1", args.base, args.nodes[:1])
            + _profile(many, args.base, args.nodes)
        )
        runs: dict[str, list[dict[str, Any]]] = {"scale1": [], many: []}
        for _ in range(args.repeat):
            for profile in runs:  # interleaved, so a busy moment of the machine hits both alike
                row = run_once(thresholds, profile, args.tests, args.timeout, args.keep)
                runs[profile].append(row)
                print(json.dumps(row), flush=True)
    one = statistics.median(r["wall_s"] for r in runs["scale1"])
    n = statistics.median(r["wall_s"] for r in runs[many])
    ratio = n / one if one else float("inf")

    def median_of(key: str, profile: str) -> float | None:
        values = [r[key] for r in runs[profile] if r.get(key) is not None]
        return round(statistics.median(values), 2) if values else None

    summary = {
        "summary": True,
        "tests": args.tests,
        "nodes": args.nodes,
        "repeat": args.repeat,
        "median_wall_s": {"scale1": one, many: n},
        "ratio": round(ratio, 3),
        "median_workload_s": {p: median_of("workload_s", p) for p in runs},
        "median_harness_s": {p: median_of("harness_s", p) for p in runs},
        "jobs_per_run": {"scale1": runs["scale1"][0]["jobs"], many: runs[many][0]["jobs"]},
        "max_ratio": args.max_ratio,
        "ok": ratio <= args.max_ratio,
        "host": os.uname().nodename,
    }
    print(json.dumps(summary), flush=True)
    return 0 if summary["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())

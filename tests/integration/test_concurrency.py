"""`pytest -n 4 --cluster=ci`: independent checks at once, without collisions in job folders,
shared-filesystem probe directories, the results file or the report; the GPU-isolation pair, whose
two jobs must run at once, passes whichever workers run its tests."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from faults_support import REPO, SHARED, SLURM_CONF, slurm_cmd, wait_until

pytestmark = pytest.mark.integration

SUITE = [
    # The GPU-isolation pair: two jobs that must run at once, from whichever worker runs its tests.
    "tests/acceptance/test_gpu_isolation.py",
    "tests/acceptance/test_placement.py",
    "tests/acceptance/test_sharedfs.py",
    "tests/acceptance/test_inventory.py",
    "tests/acceptance/test_slurm_health.py",
]


def probe_dirs() -> set[str]:
    return {str(p) for p in Path(SHARED).glob(".pytest-gpucluster/*/sharedfs-*")}


def test_four_workers_write_one_complete_results_file_and_leave_nothing(slurm_cluster, tmp_path):
    results, html = tmp_path / "results.json", tmp_path / "report.html"
    before = probe_dirs()
    argv = [
        sys.executable,
        "-m",
        "pytest",
        "-p",
        "no:cacheprovider",
        "-n",
        "4",
        "--cluster=ci",
        f"--gpucluster-results={results}",
        f"--html={html}",
        "-q",
        *SUITE,
    ]
    env = {**os.environ, "SLURM_CONF": SLURM_CONF}
    t0 = time.monotonic()
    proc = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=400, check=False)
    out = proc.stdout + proc.stderr
    doc = json.loads(results.read_text())
    print(f"-n 4: {doc['acceptance']['headline']}; {time.monotonic() - t0:.1f} s")
    # What passes without -n passes with it: the workers' jobs do not hold each other's nodes.
    assert proc.returncode == 0, out[-4000:]
    assert doc["acceptance"]["verdict"] == "PARTIAL", doc["acceptance"]
    verdicts = {t["nodeid"]: (t["verdict"], t["message"]) for t in doc["tests"]}
    assert {v for v, _ in verdicts.values()} <= {"pass", "warn", "n/a"}, verdicts
    assert doc["nodes"] == ["node1", "node2"]  # the workers' tested nodes reach the controller's results
    assert doc["status"] == "complete"
    # Every collected test is in the one file, once, with an outcome.
    summary = [line for line in out.splitlines() if " in " in line and ("passed" in line or "failed" in line)][-1]
    outcomes = ("passed", "failed", "skipped", "error", "errors", "xfailed", "n/a")
    words = summary.split()
    counted = sum(int(w) for w, nxt in itertools.pairwise(words) if w.isdigit() and nxt.rstrip(",") in outcomes)
    nodeids = [t["nodeid"] for t in doc["tests"]]
    assert len(nodeids) == len(set(nodeids)) == counted, (summary, nodeids)
    assert all(t["outcome"] in ("passed", "failed", "skipped", "error", "xfailed") for t in doc["tests"])
    # Tests on different workers did not share a job folder.
    folders = [j["folder"] for t in doc["tests"] for j in t.get("jobs", []) if "folder" in j]
    jobs = {j["job_id"]: j["folder"] for t in doc["tests"] for j in t.get("jobs", []) if "folder" in j}
    assert len(set(jobs.values())) == len(jobs), folders
    assert html.exists() and html.stat().st_size > 0
    assert probe_dirs() <= before  # every probe directory removed
    run_ids = {str(j["name"]).split("-")[0] for t in doc["tests"] for j in t.get("jobs", []) if "name" in j}
    assert len(run_ids) == 1, run_ids  # one run id shared by the workers: all findable, all cancellable

    def none_left() -> bool:
        names = slurm_cmd("squeue", "-h", "-o", "%j").split()
        return not [n for n in names if n.startswith(f"gpucluster-{next(iter(run_ids))}-")]

    wait_until("the run's jobs to leave the queue", none_left, 15)

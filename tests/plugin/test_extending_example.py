"""The site check of docs/extending.md works as written: copied beside the suite, it is declared,
planned, runs its job through the local executor and judges; on a machine without nvbandwidth
it is not applicable, naming the node."""

from __future__ import annotations

import json
import shutil
import socket
import sys
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parents[2] / "docs" / "examples" / "site-check"
PROFILE = """
[profiles.twogpu]
extends = "local"
gpus_per_node = 2
"""
# nvbandwidth's matrix as its README shows it (row: source GPU, column: destination).
MATRIX = """Running device_to_device_memcpy_read_ce.
memcpy CE GPU(row) <- GPU(column) bandwidth (GB/s)
           0         1
 0       N/A    389.55
 1    389.60       N/A
"""


@pytest.fixture
def site(gpc: pytest.Pytester) -> pytest.Pytester:
    for path in EXAMPLE.glob("*.py"):
        shutil.copy(path, gpc.path / path.name)
    thresholds = gpc.path / "thresholds.toml"
    thresholds.write_text(thresholds.read_text() + "\n" + (EXAMPLE / "thresholds-fragment.toml").read_text() + PROFILE)
    return gpc


def test_the_example_is_planned_runs_and_is_not_applicable_without_nvbandwidth(site, monkeypatch):
    monkeypatch.setenv("PATH", str(Path(sys.executable).parent) + ":/usr/bin:/bin")  # no nvbandwidth here
    dry = site.runpytest_subprocess("--cluster=twogpu", "--gpucluster-dry-run")
    dry.stdout.fnmatch_lines(["site-nvbandwidth: job of its own, when first needed; *; read by 1 test(s)"])
    run = site.runpytest_subprocess("--cluster=twogpu", "--gpucluster-results=out.json", "-rs")
    doc = json.loads((site.path / "out.json").read_text())
    (test,) = doc["tests"]
    assert test["verdict"] == "n/a", test
    assert f"nvbandwidth is not installed on {socket.gethostname()}" in test["message"]
    assert len(test["job_ids"]) == 1  # the job ran on the node and found no binary
    # Nothing was measured: the run is not accepted (INCOMPLETE exits 10), and says why.
    assert run.ret == 10, run.stdout.str()
    run.stdout.fnmatch_lines(["*INCOMPLETE*", "*1 × nvbandwidth is not installed on *"])


def test_the_example_reads_the_matrix_nvbandwidth_prints(site):
    sys.path.insert(0, str(site.path))
    try:
        import site_nvbandwidth
    finally:
        sys.path.remove(str(site.path))
    assert site_nvbandwidth.parse_matrix(MATRIX) == {"gpu0->gpu1": 389.55, "gpu1->gpu0": 389.60}


def test_a_site_metric_must_be_named_site_and_have_a_direction(site):
    thresholds = site.path / "thresholds.toml"
    thresholds.write_text(thresholds.read_text().replace('better = "higher"', 'better = "up"'))
    result = site.runpytest_subprocess("--cluster=twogpu", "--collect-only")
    result.stderr.fnmatch_lines(['*metrics."site.nvbandwidth.d2d_read".better: expected "higher" or "lower", got *'])

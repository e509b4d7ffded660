"""A test file's own declaration of what does not apply to a node shape: decided at collection,
before any job, and honoured by the required set like a marker's."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

ONE_GPU = '\n[profiles.one]\nextends = "local"\ngpus_per_node = 1\ngpus_are_real = false\n'
DECLARED = """
def gpucluster_not_applicable(gpucluster, name):
    return f"{gpucluster.gpus_per_node} GPU per node" if name == "test_declared" else None

def test_declared(gpucluster):
    raise AssertionError("a check declared not applicable does not run")

def test_other(gpucluster):
    pass
"""


def test_a_declared_not_applicable_check_is_neither_run_nor_required(gpc):
    (gpc.path / "shapes.toml").write_text((gpc.path / "thresholds.toml").read_text() + ONE_GPU)
    gpc.makepyfile(test_declared=DECLARED)
    result = gpc.runpytest("--cluster=one", "--gpucluster-thresholds=shapes.toml", "--gpucluster-results=r.json", "-rs")
    assert result.ret == 0
    result.stdout.fnmatch_lines(["*ACCEPTED*", "not applicable: 1 check(s)", "  1 × 1 GPU per node"])
    document = json.loads((gpc.path / "r.json").read_text())
    assert {t["nodeid"]: t["verdict"] for t in document["tests"]} == {
        "test_declared.py::test_declared": "n/a",
        "test_declared.py::test_other": "pass",
    }
    selection = document["selection"]
    assert selection["not_applicable"] == {"test_declared.py::test_declared": "1 GPU per node"}
    assert selection["required"] == ["test_declared.py::test_other"]
    # Left out by -k, it is still not missing: the run is whole.
    gpc.runpytest("--cluster=one", "--gpucluster-thresholds=shapes.toml", "--gpucluster-results=k.json", "-k", "other")
    assert json.loads((gpc.path / "k.json").read_text())["selection"]["not_selected"] == []


def test_one_gpu_per_node_has_no_intra_node_collective_nor_its_telemetry(gpc):
    (gpc.path / "shapes.toml").write_text((gpc.path / "thresholds.toml").read_text() + ONE_GPU)
    for name in ("test_nccl.py", "test_telemetry.py"):
        shutil.copy(REPO / "tests" / "acceptance" / name, gpc.path / name)
    # In a process of its own: the unit tier's test_telemetry module would shadow the copy.
    result = gpc.runpytest_subprocess(
        "--cluster=one", "--gpucluster-thresholds=shapes.toml", "--gpucluster-results=r.json", "-rs"
    )
    tests = json.loads((gpc.path / "r.json").read_text())["tests"]
    assert tests and {t["verdict"] for t in tests} == {"n/a"}, [(t["nodeid"], t["verdict"]) for t in tests]
    assert not any(t["job_ids"] for t in tests)  # decided before any job
    reasons = {
        t["nodeid"].split("[")[0]: t["message"]
        for t in tests
        if "inside_node" in t["nodeid"] or "test_telemetry" in t["nodeid"]
    }
    intra = reasons["test_nccl.py::test_busbw_inside_node"]
    assert intra.endswith("not applicable: node has 1 GPU: no intra-node collective")
    assert reasons["test_telemetry.py::test_node_was_sampled"].endswith(
        "not applicable: node has 1 GPU: no intra-node collective, the load these checks sample; the training "
        "job's telemetry is judged in test_training"
    )
    result.stdout.fnmatch_lines(["*3 × node has 1 GPU: no intra-node collective"])

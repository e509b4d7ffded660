"""A missing threshold set or bound is never a REJECT: a profile naming a GPU model no set applies
to is a usage error before any job (unless the run calibrates), and a bound missing for a model
learned at run time leaves its check unjudged, the run INCOMPLETE."""

from __future__ import annotations

import json
import textwrap

import pytest

from pytest_gpucluster.config import load

# Sets with match lines that fit no H200, and a Slurm profile of H200 nodes naming none of them.
H200_NO_SET = """
[profiles.h200]
executor = "slurm"
partition = "gpu"
nodes = 2
gpus_per_node = 8
gpu_model = "NVIDIA H200"
shared_fs = "SHARED"

[thresholds.default]
"gpu.temperature" = { unit = "C", fail_above = 85 }

[thresholds.cpu]
match = ["cpu"]
"compute.matmul_bf16" = { unit = "TFLOP/s", fail_below = 0.0001 }

[thresholds.h100]
match = ["H100"]
"compute.matmul_bf16" = { unit = "TFLOP/s", fail_below = 600 }
"""

# This machine through the local executor (no GPU here: model "cpu"); the cpu set lacks the
# GEMM bound.
LOCAL_CPU_SET_SHORT = """
[profiles.local]
executor = "local"
nodes = 1

[thresholds.default]
"gpu.temperature" = { unit = "C", fail_above = 85 }

[thresholds.cpu]
match = ["cpu"]
"compute.memcopy" = { unit = "TB/s", fail_below = 0.0001 }
"""

SUITE = """
from pytest_gpucluster.verdict import Measurement

def test_matmul(judge):
    judge.all([Measurement("compute.matmul_bf16", v, "TFLOP/s", where=f"node1:gpu{g}")
               for g, v in enumerate([98.0, 100.0, 102.0])])

def test_temperature(judge):
    judge(Measurement("gpu.temperature", 40.0, "C", where="node1:gpu0"))
"""


def _thresholds(pytester: pytest.Pytester, text: str) -> None:
    text = text.replace("SHARED", str(pytester.path))
    (pytester.path / "thresholds.toml").write_text(textwrap.dedent(text))
    pytester.makeini("[pytest]\naddopts = -p no:cacheprovider\ntestpaths = .\n")


def test_a_profile_naming_a_gpu_model_no_set_applies_to_is_a_usage_error(pytester):
    _thresholds(pytester, H200_NO_SET)
    pytester.makepyfile(test_cluster=SUITE)
    result = pytester.runpytest_subprocess("--cluster=h200", "--gpucluster-results=r.json")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    err = result.stderr.str()
    assert "profiles.h200.gpu_model = 'NVIDIA H200': no threshold set applies to it" in err
    assert "match lists: cpu: cpu; h100: H100" in err
    assert 'thresholds = "SET"' in err and "--gpucluster-calibrate=PATH" in err
    assert not (pytester.path / "r.json").exists()  # nothing ran, nothing was written


def test_the_shipped_sets_without_match_lines_refuse_an_h200_profile(gpc):
    text = (gpc.path / "thresholds.toml").read_text()
    text = "\n".join(line for line in text.splitlines() if not line.startswith("match = "))
    text += '\n[profiles.h200-bare]\nexecutor = "slurm"\npartition = "gpu"\nnodes = 1\ngpus_per_node = 8\n'
    text += 'gpu_model = "NVIDIA H200"\n'
    (gpc.path / "thresholds.toml").write_text(text)
    gpc.makepyfile(test_cluster=SUITE)
    result = gpc.runpytest_subprocess("--cluster=h200-bare")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*profiles.h200-bare.gpu_model = 'NVIDIA H200': no threshold set applies*"])


def test_a_calibrating_run_needs_no_set_and_writes_one(pytester):
    _thresholds(pytester, H200_NO_SET)
    pytester.makepyfile(test_cluster=SUITE)
    result = pytester.runpytest_subprocess(
        "--cluster=h200", "--gpucluster-results=r.json", "--gpucluster-calibrate=frag.toml"
    )
    # What it can judge it judges; the GEMM has no bound: unjudged, the run INCOMPLETE, not REJECTED.
    assert result.ret == 10, result.stdout.str()
    result.stdout.fnmatch_lines(["*= 1 passed, 1 not judged in *"])  # counted as the verdict counts it
    doc = json.loads((pytester.path / "r.json").read_text())
    assert doc["acceptance"]["verdict"] == "INCOMPLETE"
    fragment = (pytester.path / "frag.toml").read_text()
    assert "verdict INCOMPLETE" in fragment and "verdict ?" not in fragment
    assert 'match = ["NVIDIA H200"]' in fragment and '"compute.matmul_bf16" = { unit = "TFLOP/s"' in fragment
    # The fragment is the set the profile lacked: with it, the run is judged in full.
    text = (pytester.path / "thresholds.toml").read_text() + "\n" + fragment
    (pytester.path / "thresholds.toml").write_text(text)
    assert (
        load(pytester.path / "thresholds.toml")
        .thresholds_for(load(pytester.path / "thresholds.toml").profile("h200"))
        .name.startswith("calibrated-")
    )


def test_a_bound_missing_for_the_model_found_at_run_time_leaves_the_check_unjudged(pytester):
    _thresholds(pytester, LOCAL_CPU_SET_SHORT)
    pytester.makepyfile(test_cluster=SUITE)
    result = pytester.runpytest_subprocess("--cluster=local", "--gpucluster-results=r.json", "-rs")
    assert result.ret == 10, result.stdout.str()  # INCOMPLETE, never REJECTED (1)
    result.stdout.fnmatch_lines(
        [
            "*gpucluster: INCOMPLETE*",
            "*could not judge: *no threshold for 'compute.matmul_bf16'*",
            "*= 1 passed, 1 not judged in *",
        ]
    )
    doc = json.loads((pytester.path / "r.json").read_text())
    acc = doc["acceptance"]
    assert acc["verdict"] == "INCOMPLETE"
    assert acc["nodes"]["verdicts"]["node1"]["verdict"] == "INCOMPLETE"
    (reason,) = acc["reasons"]
    assert "no threshold for 'compute.matmul_bf16' in set 'cpu' nor in 'default'" in reason
    matmul = next(t for t in doc["tests"] if t["name"] == "test_matmul")
    assert matmul["verdict"] == "not_judged"
    # Every value is kept, unjudged, for a later --gpucluster-calibrate to write lines from.
    assert [m["value"] for m in matmul["measurements"]] == [98.0, 100.0, 102.0]
    assert {m["status"] for m in matmul["measurements"]} == {"unjudged"}
    assert matmul["measurements"][0]["threshold"]["origin"] == "missing"


def test_a_bound_read_directly_and_missing_leaves_the_check_unjudged(pytester):
    _thresholds(pytester, LOCAL_CPU_SET_SHORT.replace('match = ["cpu"]', 'match = ["nothing-here"]'))
    pytester.makepyfile(
        test_cluster="""
        def test_reads_a_bound(thresholds):
            assert thresholds["compute.matmul_bf16"].fail_below
        """
    )
    result = pytester.runpytest_subprocess("--cluster=local", "--gpucluster-results=r.json", "-rs")
    assert result.ret == 10, result.stdout.str()
    doc = json.loads((pytester.path / "r.json").read_text())
    (test,) = doc["tests"]
    assert test["verdict"] == "not_judged"
    # No set matches this machine's model ("cpu"): said once, with the ways out.
    assert "no [thresholds.SET] matches GPU model 'cpu'" in test["message"]
    assert "nor in 'default'" not in test["message"]

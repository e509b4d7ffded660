"""torch that cannot use the GPUs NVML sees, through a real run on the local executor: the node
raises what the driver check raises there (a recorded probe: torch 2.13.0+cu130 on a node whose
driver runs CUDA 12.2 at most), and the run names the environment once, judges no node on it
(INCOMPLETE) and excludes none."""

from __future__ import annotations

import json
from pathlib import Path

SUITE = """
from pytest_gpucluster.verdict import Measurement
from pytest_gpucluster.workloads.gpu_environment import TorchCannotUseGpus, TorchGpuMismatch

TOO_OLD = {too_old!r}


def _probe(ctx):
    # What check_torch_can_use_gpus raises on such a node (NVML: 8 GPUs, driver 535.183.01).
    raise TorchCannotUseGpus(TorchGpuMismatch(ctx.hostname, "2.13.0+cu130", "13.0", "535.183.01", 8, TOO_OLD))


def test_busbw_inside_node(gpucluster, judge):
    gpucluster.run(_probe, gpucluster.spec("nccl-intra", gpus_per_node=0))


def test_compute(gpucluster, judge):
    gpucluster.run(_probe, gpucluster.spec("compute", gpus_per_node=0))


def test_temperature(judge):
    judge(Measurement("gpu.temperature", 40.0, "C", where="n1:gpu0"))
"""


def test_torch_that_cannot_use_the_driver_is_the_environments_fault_said_once(gpc):
    data = Path(__file__).resolve().parents[1] / "data" / "gpu_environment"
    too_old = (data / "torch_cu130_driver_535_representative_sample.txt").read_text().strip()
    gpc.makepyfile(test_env=SUITE.format(too_old=too_old))
    result = gpc.runpytest_subprocess("--gpucluster-results=r.json")
    doc = json.loads((gpc.path / "r.json").read_text())
    acc = doc["acceptance"]
    assert acc["verdict"] == "INCOMPLETE", result.stdout.str()
    assert result.ret == 10, result.stdout.str()
    sentence = "torch 2.13.0+cu130 (CUDA 13.0) cannot use driver 535.183.01 on "
    assert acc["headline"].startswith(f"INCOMPLETE: {sentence}"), acc["headline"]
    assert sum(sentence in r for r in acc["reasons"]) == 1, acc["reasons"]  # once, for both checks
    assert "2 checks not judged" in acc["reasons"][0]
    assert acc["nodes"]["exclude"] == ""  # no node rejected, none to exclude or drain
    assert all(v["verdict"] != "REJECTED" for v in acc["nodes"]["verdicts"].values())
    faulted = [t for t in doc["tests"] if t["cluster_fault"]]
    assert {t["cluster_fault"]["what"] for t in faulted} == {"environment"} and len(faulted) == 2


GROUP = """
from pytest_gpucluster.workloads.distributed import process_group


def _group(ctx):
    with process_group(ctx, backend="gloo", timeout_s=30):
        return ctx.rank


def test_group_a(gpucluster, judge):
    gpucluster.run(_group, gpucluster.spec("group", tasks_per_node=2, gpus_per_node=0))


def test_group_b(gpucluster, judge):
    gpucluster.run(_group, gpucluster.spec("group", tasks_per_node=2, gpus_per_node=0))
"""


def test_a_network_setting_that_matches_nothing_is_the_configurations_fault_said_once(gpc):
    # The profile's env names an interface this machine does not have: every task of every
    # collective job stops before its process group, the run names the setting once.
    (gpc.path / "bad.toml").write_text(
        (gpc.path / "thresholds.toml").read_text()
        + '\n[profiles.badnet]\nextends = "local"\n[profiles.badnet.env]\nGLOO_SOCKET_IFNAME = "ib9"\n'
    )
    gpc.makepyfile(test_group=GROUP)
    result = gpc.runpytest_subprocess(
        "--cluster=badnet", "--gpucluster-thresholds=bad.toml", "--gpucluster-results=r.json"
    )
    doc = json.loads((gpc.path / "r.json").read_text())
    acc = doc["acceptance"]
    assert result.ret == 10 and acc["verdict"] == "INCOMPLETE", result.stdout.str()
    sentence = "GLOO_SOCKET_IFNAME=ib9 (from the profile's env) matches nothing on "
    assert acc["headline"].startswith(f"INCOMPLETE: {sentence}"), acc["headline"]
    assert sum(sentence in r for r in acc["reasons"]) == 1 and "2 checks not judged" in acc["reasons"][0]
    assert acc["nodes"]["exclude"] == "" and acc["nodes"]["cluster_wide"] == []
    found = [f for t in doc["tests"] for f in t["findings"]]
    assert {(f["scope"], f["setting"], f["severity"]) for f in found} == {
        ("config", "GLOO_SOCKET_IFNAME", "not_judged")
    }
    result.stdout.fnmatch_lines(["*= 2 not judged in *"])  # pytest's count line says what the verdict says

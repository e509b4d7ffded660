"""The fabric check's judging through a real run of the plugin, on the representative 4×H200
NVLink snapshot pairs (tests/data/fabric, built from a healthy node's measured rises).

NVLink counters come from NVML on the node, and this machine has no GPU; nothing stands in for
NVML or Slurm here. The test file below hands the recorded pair to the same login-side function
the acceptance check calls (``checks.fabric_node.judge_node``) and acts on its outcome with that
check's own ``act_on``, through the plugin's own ``judge`` and ``record`` fixtures, so what is checked is what a
customer reads: the run's verdict, the first
sentence of the failure, the warnings and the per-link detail in the results file. The reading
side runs through the plugin in test_wired_checks.py (a recorded InfiniBand tree) and through
Slurm in tests/integration/test_fabric_ci.py. NVLink left unread on real GPUs makes the run
INCOMPLETE, not n/a."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

DATA = Path(__file__).resolve().parents[2] / "tests" / "data" / "fabric"
ACCEPTANCE = Path(__file__).resolve().parents[1] / "acceptance" / "test_fabric.py"
# A node's pair judged as tests/acceptance/test_fabric.py judges it, and acted on by that file's
# own act_on (loaded from its path, so the acceptance code itself runs here).
ACT = f"""
import importlib.util

from pytest_gpucluster.checks import fabric_node

_spec = importlib.util.spec_from_file_location("acceptance_fabric", {str(ACCEPTANCE)!r})
acceptance = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(acceptance)


def judged(cluster, judge, record, node, before, after, job_ids):
    found = fabric_node.judge_node(
        node, before, after, rules=cluster.profile.fabric, nvlink_required=True, job_ids=job_ids
    )
    acceptance.act_on(found, cluster, judge, record)
"""

CHECK = """
import json
from pathlib import Path

from act import judged
from pytest_gpucluster.workloads.fabric_counters import snapshot_from_dict

DATA = Path({data!r})


def _snap(name):
    path = DATA / f"nvlink_4xH200_{{name}}_representative_sample.json"
    return snapshot_from_dict(json.loads(path.read_text()))


def test_fabric_error_counters_did_not_rise(cluster, judge, record):
    judged(cluster, judge, record, "node1", _snap("before"), _snap({after!r}), ["4711", "4790"])
"""


def _run(gpc: pytest.Pytester, after: str) -> tuple[pytest.RunResult, dict]:
    gpc.makepyfile(act=ACT, test_fabric=CHECK.format(data=str(DATA), after=after))
    result = gpc.runpytest_subprocess("--cluster=local", "--gpucluster-results=out.json")
    return result, json.loads((gpc.path / "out.json").read_text())


def test_one_replay_on_one_link_rejects_naming_node_gpu_and_link_first(gpc):
    result, doc = _run(gpc, "after_replay")
    assert doc["acceptance"]["verdict"] == "REJECTED", result.stdout.str()
    first = "node1: NVLink replay +1 on gpu2 link 5 over 5 min 21 s (fail > 0)"
    assert doc["acceptance"]["reasons"][0].startswith(first)
    (test,) = doc["tests"]
    assert test["verdict"] == "fail" and test["message"].removeprefix("Failed: ").startswith(first), test
    assert test["problems"] == [first]
    # The healthy CRC rate stays under its warn line: no warning beside the failure.
    assert not test.get("warnings"), test
    assert result.ret == 1


def test_a_healthy_4x_h200_passes_with_its_crc_rate_noted(gpc):
    result, doc = _run(gpc, "after_healthy")
    (test,) = doc["tests"]
    assert test["verdict"] == "pass", test
    assert not test.get("warnings"), test
    assert doc["acceptance"]["verdict"] != "REJECTED", doc["acceptance"]
    findings = {f["subject"]: f for f in test["fabric"]["findings"]}
    assert findings["nvlink_ecc"]["status"] == "note" and len(findings["nvlink_ecc"]["detail"]) == 72
    assert findings["nvlink_crc"]["status"] == "note"
    assert test["fabric"]["rules"]["nvlink_crc"]["lines"] == "warn ≥ 200/s, fail ≥ 500/s per GPU"
    result.stdout.fnmatch_lines(["*NVLink ECC 130–134/s on gpu0–3 over 5 min 21 s (recorded, not judged)*"])


UNREAD = """
from act import judged
from pytest_gpucluster.workloads.fabric_counters import FabricSnapshot

STATUS = "unsupported: NVML unusable (Driver Not Loaded)"


def test_fabric_error_counters_did_not_rise(cluster, judge, record):
    before = FabricSnapshot("node1", 0.0, "/sys/class/infiniband", (), (), STATUS)
    after = FabricSnapshot("node1", 60.0, "/sys/class/infiniband", (), (), STATUS)
    judged(cluster, judge, record, "node1", before, after, ["1", "2"])
"""


def test_nvlink_unread_on_real_gpus_leaves_the_run_incomplete(gpc):
    gpc.makepyfile(act=ACT, test_fabric=UNREAD)
    result = gpc.runpytest_subprocess("--cluster=local", "--gpucluster-results=out.json")
    doc = json.loads((gpc.path / "out.json").read_text())
    (test,) = doc["tests"]
    assert test["verdict"] == "not_judged", test  # not n/a: the check could not judge what is there
    assert "node1: NVLink error counters not read (NVML unusable (Driver Not Loaded))" in test["message"]
    assert doc["acceptance"]["verdict"] == "INCOMPLETE", doc["acceptance"]
    assert result.ret == 10


def test_a_gpu_with_only_its_pcie_link_counted_is_judged_and_one_without_is_not_applicable():
    # One H200 in a VM: no InfiniBand, no NVLink, the PCIe replay counter read (0 before and after).
    import importlib.util
    from dataclasses import replace

    from pytest_gpucluster.workloads.fabric_counters import FabricSnapshot, GpuNvLinks, PcieAer

    spec = importlib.util.spec_from_file_location("acceptance_fabric", ACCEPTANCE)
    assert spec is not None and spec.loader is not None
    acceptance = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(acceptance)
    counted = GpuNvLinks(0, (), (), {"pcie_replay": 0})
    snap = FabricSnapshot("vm", 1.0, "/sys/class/infiniband", (), (counted,), "ok")
    assert acceptance._nothing_to_read(snap, True) is None
    bare = FabricSnapshot("vm", 1.0, "/sys/class/infiniband", (), (GpuNvLinks(0, (), (), {}, ("pcie_replay",)),), "ok")
    aer = PcieAer("gpu0", "0000:18:00.0", {"aer_fatal": 0})
    assert acceptance._nothing_to_read(replace(bare, aer=(aer,)), False) is None
    assert acceptance._nothing_to_read(bare, False) == (
        "no InfiniBand port under /sys/class/infiniband and no NVLink or PCIe replay counter on its GPUs"
    )

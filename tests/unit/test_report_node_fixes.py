"""The report's node configuration: the settings the node-configuration checks found (on recorded
node readings), grouped per node with the change; a node with a failing setting ahead of the
failures it may explain, settings that only warn after them; on a results file of a real run
(docs/samples)."""

from __future__ import annotations

import dataclasses
import html as html_text
import json
from pathlib import Path

from pytest_gpucluster.checks import node_config
from pytest_gpucluster.config.node_config import NodeConfig
from pytest_gpucluster.report import html
from pytest_gpucluster.report.node_fixes import node_fixes
from pytest_gpucluster.results import codec
from pytest_gpucluster.verdict import Finding
from pytest_gpucluster.workloads.node_settings import Limit, NodeSettings, parse_swap_total

REPO = Path(__file__).resolve().parents[2]
SAMPLE = REPO / "docs" / "samples" / "results-h100-1gpu-slurm.json"  # ACCEPTED, node1
MEMINFO = REPO / "tests" / "data" / "node_config" / "proc_meminfo_8GiB_swap_representative_sample.txt"


def _settings_found() -> list[Finding]:
    """What the swap and governor checks find on node1 with the recorded 8 GiB of swap and half
    its CPUs on powersave."""
    limits = {"memlock": Limit(None, None), "nofile": Limit(20000, 20000)}
    node = NodeSettings("node1", limits=limits, swap_total_bytes=parse_swap_total(MEMINFO.read_text()))
    node = dataclasses.replace(node, governors={"performance": 2, "powersave": 2})
    return [*node_config.swap(node, NodeConfig()).findings, *node_config.governor(node, NodeConfig()).findings]


def _doc(symptom: bool) -> dict:
    doc = json.loads(SAMPLE.read_text())
    doc.pop("acceptance", None)
    swap, governor = _settings_found()
    for name, found in (("test_no_swap[node1]", swap), ("test_cpu_frequency_governor[node1]", governor)):
        doc["tests"].append(
            {"nodeid": f"tests/acceptance/test_node_config.py::{name}", "outcome": "passed", "verdict": "warn",
             "findings": [codec.encode_finding(found)], "node": "node1", "measurements": [], "job_ids": []}
        )  # fmt: skip
    if symptom:
        compute = next(t for t in doc["tests"] if "test_gpu_compute_and_memory[node1]" in t["nodeid"])
        slow = Finding.on_node("node1", "node1:gpu0: compute.matmul_bf16 = 300 TFLOP/s, below the fail line", gpu=0)
        compute.update(outcome="failed", verdict="fail", findings=[codec.encode_finding(slow)])
    return codec.with_verdicts(doc)


def test_settings_are_grouped_per_node_with_the_change():
    (fixes,) = node_fixes(_doc(symptom=True))
    assert fixes.node == "node1"
    swap, governor = _settings_found()
    assert [(f.setting, f.found, f.expected, f.remedy) for f in fixes.fixes] == [
        (swap.setting, "8 GiB", "0", swap.remedy),
        (governor.setting, governor.found, governor.expected, governor.remedy),
    ]
    assert fixes.fixes[0].checks == ("test_node_config.py::test_no_swap[node1]",)
    # The node's other failing check is named beside its settings, not as one of them.
    assert fixes.symptoms == ("test_compute.py::test_gpu_compute_and_memory[node1]",)


def test_settings_that_only_warn_follow_the_failures_they_do_not_explain():
    doc = _doc(symptom=True)
    block = html.acceptance_block(doc, codec.decode_recorded(doc))
    assert codec.decode_recorded(doc).acceptance.verdict == "REJECTED"
    # The slow GEMM is the culprit; swap and a governor that warn come after it.
    assert 'id="gc-node-fixes"' not in block
    failures, warned = block.index('id="gc-failures"'), block.index('id="gc-node-settings-warned"')
    assert block.index('id="gc-node-summary"') < failures < warned
    swap = next(f for f in _settings_found() if f.setting == "swap")
    table = block[warned:]
    assert "8 GiB" in table and html_text.escape(swap.remedy) in table
    assert "test_gpu_compute_and_memory[node1]" in table


def test_a_failing_setting_comes_ahead_of_the_failures_with_its_change():
    doc = _doc(symptom=True)
    memlock = Finding.of_setting(
        "node1", "RLIMIT_MEMLOCK", "node1: memlock 64 KiB in jobs", found="64 KiB", expected="unlimited",
        remedy="LimitMEMLOCK=infinity in slurmd's unit",
    )  # fmt: skip
    doc["tests"].append(
        {"nodeid": "tests/acceptance/test_node_config.py::test_job_limits[node1]", "outcome": "failed",
         "verdict": "fail", "findings": [codec.encode_finding(memlock)], "node": "node1", "measurements": [],
         "job_ids": []}
    )  # fmt: skip
    doc = codec.with_verdicts(doc)
    block = html.acceptance_block(doc, codec.decode_recorded(doc))
    fixes, failures = block.index('id="gc-node-fixes"'), block.index('id="gc-failures"')
    assert fixes < block.index('id="gc-node-summary"') < failures
    table = block[fixes:failures]
    # The node's settings stay together: the failing one first, then those that warn.
    assert table.index("RLIMIT_MEMLOCK") < table.index("8 GiB") and "LimitMEMLOCK=infinity" in table
    assert 'id="gc-node-settings-warned"' not in block


def test_a_run_without_such_settings_shows_no_such_block():
    doc = codec.with_verdicts(json.loads(SAMPLE.read_text()))
    assert node_fixes(doc) == []
    assert 'id="gc-node-fixes"' not in html.acceptance_block(doc, codec.decode_recorded(doc))

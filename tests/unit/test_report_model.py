"""The report's pure parts: readable properties, versions, HTML escaping, plots, a 64-node page."""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path

from result_docs import document as _doc
from result_docs import finding as _f
from result_docs import measurement as _m
from result_docs import record_of_test as _t

from pytest_gpucluster import verdict
from pytest_gpucluster.config import Threshold
from pytest_gpucluster.plan.selection import Selection
from pytest_gpucluster.report import html, model, plots
from pytest_gpucluster.results import codec
from pytest_gpucluster.results.document import ResultsDocument
from pytest_gpucluster.verdict import Finding, Measurement, Verdict, judge

REPO = Path(__file__).resolve().parents[2]


def test_junit_properties_are_readable_lines():
    props = model.junit_properties(
        [
            _m("nccl.all_reduce.intra_node", 354.2, "pass", "node1", fail_below=320, warn_below=340),
            {"kind": "job", "job_id": "42", "name": "run-sweep", "folder": "/shared/jobs"},
            {"kind": "series", "name": "s", "points": []},
        ]
    )
    assert props == [
        ("nccl.all_reduce.intra_node[node1]", "354.2 GB/s pass (fail < 320 GB/s, warn < 340 GB/s)"),
        ("gpucluster.job", "42 run-sweep /shared/jobs"),
    ]


def test_versions_fall_back_to_the_inventory():
    doc = {
        "environment": {"plugin": "0.1.0", "cuda": "12.8"},
        "inventory": {"node1": {"driver": "570.1"}, "node2": {"driver": "570.2"}},
    }
    got = dict(model.versions(doc))
    assert got["CUDA"] == "12.8" and got["NVIDIA driver"] == "570.1 / 570.2" and got["NCCL"] == "not recorded"


def test_every_run_value_is_escaped_in_html():
    evil = "<img src=x onerror=alert(1)>"
    doc = _doc(
        [
            _t(
                f"a::test_x[{evil}]",
                "fail",
                [_m("gpu.temperature", 99, "fail", f"node1:{evil}", fail_above=85)],
                message=evil,
                findings=[_f(evil, node=f"node1:{evil}")],
            )
        ]
    )
    doc["tests"][0]["logs"] = [{"job_id": "1", "path": "/x", "tail": evil}]
    page = html.render_page(codec.with_verdicts(doc))
    assert evil not in page and "&lt;img src=x onerror=alert(1)&gt;" in page


def test_series_with_the_same_name_share_one_plot_with_its_threshold_line():
    series = [
        {
            "name": "busbw",
            "where": w,
            "x_label": "bytes",
            "y_label": "GB/s",
            "threshold": 300.0,
            "x_log": True,
            "points": [[2**k, 10.0 * k] for k in range(10, 30)],
        }
        for w in ("node1", "node2")
    ]
    doc = {"tests": [{"series": series[:1]}, {"series": series[1:]}]}
    (plot,) = plots.series_plots(doc)
    svg = base64.b64decode(plot.data_uri.split(",", 1)[1]).decode()
    assert plot.title == "busbw" and svg.startswith("<?xml") and "<svg" in svg
    assert "node1" in svg and "node2" in svg and "fail line" in svg


# --------------------------------------------------------------------------- a 64-node cluster

NODES_64 = [f"gpu-{i:03d}" for i in range(1, 65)]


def synthetic_64_node_doc() -> dict:
    """A synthetic results document of 64 nodes × 8 H100 GPUs, built from the plugin's own types
    (ResultsDocument, TestRecord, judged Measurements): three nodes fail (a hot GPU, a slow GPU, an
    InfiniBand port down beside NVLink CRC errors on 72 links), one is not judged in full (a skipped
    check), one passes with a warning.
    docs/samples/acceptance-64node-synthetic.html is rendered from it (docs/report.md says how)."""
    doc = ResultsDocument(profile="synthetic-64x8", thresholds_file="thresholds.toml", thresholds_sha256="0" * 64)
    doc.started, doc.finished, doc.status, doc.wall_s = (
        "2026-11-23T20:00:00+00:00",
        "2026-11-23T20:41:07+00:00",
        "complete",
        2467.0,
    )
    doc.nodes = list(NODES_64)
    doc.cluster = {
        "profile": doc.profile,
        "description": "synthetic: 64 nodes × 8 GPUs, no real measurement",
        "executor": "slurm",
        "gpu_model": "NVIDIA H100 80GB HBM3",
        "gpus_per_node": 8,
        "nodes_expected": 64,
    }
    doc.environment = {
        "plugin": "0.1.0",
        "python": "3.12.3",
        "torch": "2.11.0",
        "nccl": "2.27.5",
        "cuda": "12.9",
        "driver": "575.57.08",
        "slurm": "24.11.5",
        "thresholds_set": "h100",
    }
    summary = {
        "os": "Ubuntu 24.04.3 LTS",
        "gpu_model": "NVIDIA H100 80GB HBM3",
        "gpu_count": 8,
        "driver": "575.57.08",
        "cuda": "12.9",
        "ib_devices": 8,
        "ib_active_ports": 8,
    }
    doc.inventory = {n: {"summary": summary, "hostname": n} for n in NODES_64}
    temp = Threshold("gpu.temperature", "C", fail_above=85, warn_above=75, source="thresholds.h100.gpu.temperature")
    tflops = Threshold("compute.matmul_bf16", "TFLOP/s", fail_below=600, warn_below=650, source="thresholds.h100")
    busbw = Threshold("nccl.all_reduce.intra_node", "GB/s", fail_below=320, warn_below=340, source="thresholds.h100")

    def measured(t: Threshold, value: float, node: str, gpu: int | None = None) -> tuple[Verdict, Finding | None]:
        v = judge(Measurement.at(t.metric, value, t.unit, node, gpu=gpu), t)
        return v, v.finding()

    def add(nodeid: str, outcome: str, measured=(), findings=(), message: str = "", node: str = "") -> None:
        rec = doc.record(nodeid)
        rec.outcome, rec.message, rec.node = outcome, message, node
        rec.verdicts = [v for v, _ in measured]
        # as the judge records them: a measurement past its line is a finding
        rec.findings = [*(f for _, f in measured if f is not None), *findings]
        rec.duration_s = 12.0

    acceptance = "tests/acceptance"
    for n in NODES_64:
        temps = [
            measured(temp, 88 if (n, g) == ("gpu-017", 3) else 78 if (n, g) == ("gpu-042", 0) else 41 + g, n, g)
            for g in range(8)
        ]
        hot = n == "gpu-017"
        add(
            f"{acceptance}/test_gpu_health.py::test_gpu_health[{n}]",
            "failed" if hot else "passed",
            temps,
            message="Failed: gpu-017:gpu3: gpu.temperature = 88 C is above the fail line 85 C" if hot else "",
            node=n,
        )
        down = n == "gpu-051"
        add(
            f"{acceptance}/test_infiniband.py::test_ib_ports_active[{n}]",
            "failed" if down else "passed",
            findings=[Finding.on_node(n, f"{n}: mlx5_3 port 1 is DOWN", port="mlx5_3/1")] if down else [],
            message=f"Failed: {n}: mlx5_3 port 1 is DOWN" if down else "",
            node=n,
        )
        add(
            f"{acceptance}/test_nccl.py::test_all_reduce_intra_node[{n}]",
            "passed",
            [measured(busbw, 361.0 + int(n[-3:]) % 7, n)],
            node=n,
        )
        skipped = n == "gpu-060"
        add(
            f"{acceptance}/test_dcgm.py::test_dcgm_diagnostics[{n}]",
            "skipped" if skipped else "passed",
            message=f"Skipped: dcgmi is not installed on {n}" if skipped else "",
            node=n,
        )
        # NVLink CRC errors on every link of four GPUs: one sentence per link and counter, as a
        # fabric check writes them; the report folds them into one line per node and counter.
        crc = [
            Finding.on_node(
                n,
                f"{n}:gpu{g} link {link}: nvlink_crc_{kind}_errors rose 0 → {3 + g * link} "
                f"(+{3 + g * link}, at most +0 allowed) over 41 min 7 s",
                gpu=g,
                port=f"link {link}",
            )
            for g in range(4)
            for link in range(18)
            for kind in ("flit", "data")
        ]
        add(
            f"{acceptance}/test_fabric.py::test_fabric_error_counters_did_not_rise[{n}]",
            "failed" if down else "passed",
            findings=crc if down else [],
            message=f"Failed: {'; '.join(f.text for f in crc[:2])} ..." if down else "",
            node=n,
        )
    speed = [
        measured(tflops, 410.0 if (n, g) == ("gpu-033", 5) else 702.0 + g, n, g) for n in NODES_64 for g in range(8)
    ]
    add(
        f"{acceptance}/test_compute.py::test_matmul_bf16",
        "failed",
        speed,
        message="Failed: gpu-033:gpu5: compute.matmul_bf16 = 410 TFLOP/s is below the fail line 600 TFLOP/s",
    )
    add(
        f"{acceptance}/test_nccl.py::test_all_reduce_across_nodes",
        "passed",
        [
            (
                judge(
                    Measurement.across("nccl.all_reduce.inter_node", 371.5, "GB/s", NODES_64),
                    Threshold("nccl.all_reduce.inter_node", "GB/s", fail_below=300, source="thresholds.h100"),
                ),
                None,
            )
        ],
    )
    doc.selection = Selection(required=list(doc.tests))
    return codec.with_verdicts(doc.to_json())


def test_a_64_node_report_names_the_bad_nodes_and_stays_compact():
    doc = synthetic_64_node_doc()
    nodes = verdict.node_verdicts(codec.decode_run(doc), verdict.acceptance(codec.decode_run(doc)).verdict)
    assert nodes.summary == "60 of 64 nodes accepted; rejected: gpu-[017,033,051]; not judged in full: gpu-060"
    assert nodes.exclude == "gpu-[017,033,051]"
    decided = {v.node: v.checks for v in nodes.verdicts if v.checks}
    assert decided == {
        "gpu-017": ("test_gpu_health",),
        "gpu-033": ("test_matmul_bf16",),
        "gpu-051": ("test_ib_ports_active", "test_fabric_error_counters_did_not_rise"),
        "gpu-060": ("test_dcgm_diagnostics",),
    }

    page = html.render_page(doc)
    summary = page.split('id="gc-environment"')[0]
    assert "Nodes: 60 of 64 nodes accepted; rejected: gpu-[017,033,051]; not judged in full: gpu-060" in summary
    assert "64 nodes: gpu-[001-064]" in summary and "sbatch --exclude=gpu-[017,033,051]" in summary
    # the nodes that are not accepted come first, with the check that decided and its evidence
    rows = re.findall(
        r'<tr><td class="gc-mono">(gpu-\d+)</td><td>.*?</td><td class="gc-mono">(.*?)</td><td>(.*?)</td>', summary
    )
    assert [(n, c) for n, c, _ in rows] == [
        ("gpu-017", "gpu_health"),
        ("gpu-033", "matmul_bf16"),
        ("gpu-051", "ib_ports_active, fabric_error_counters_did_not_rise"),
        ("gpu-060", "dcgm_diagnostics"),
    ]
    assert "gpu-017:gpu3: gpu.temperature = 88 C is above the fail line 85 C" in rows[0][2]
    accepted = re.search(r'id="gc-nodes-accepted">Accepted \(60\): <span class="gc-mono">(.*?)</span>', summary)
    assert accepted and accepted.group(1) == "gpu-[001-016,018-032,034-050,052-059,061-064]"
    assert "gpu-005" not in summary  # an accepted node is in the hostlist only

    matrix = re.search(r'<table class="gc-matrix" id="gc-matrix">(.*?)</table>', page, re.S).group(1)
    labels = re.findall(r'<tr><th class="gc-mono[^"]*">(.*?)</th>', matrix)
    clean = "gpu-[001-016,018-032,034-041,043-050,052-059,061-064] (59 nodes)"
    assert labels == ["gpu-017", "gpu-033", "gpu-051", "gpu-060", "gpu-042", clean]  # every result on a node
    assert matrix.count("<tr>") == 2 + len(labels)  # two header rows, no row per green node
    assert 'title="pass on gpu-[001-016,018-032,034-041,043-050,052-059,061-064]"' in matrix
    # 144 sentences of NVLink CRC errors, one per link and counter: one line per node and counter
    failures = re.search(r'<h3 id="gc-failures">Failures</h3>(.*?)</ul>', summary, re.S).group(1)
    crc = [line for line in re.findall(r"<li>(.*?)</li>", failures, re.S) if "nvlink_crc" in line]
    assert len(crc) == 2 and all("gpu-051:gpu0–3 link 0–17: nvlink_crc_" in line and "×72" in line for line in crc)
    assert "rose 0 → 3–54 (+3–54, at most +0 allowed)" in crc[0] and 'href="#gc-t-' in crc[0]
    evidence = rows[2][2]
    assert evidence.count("nvlink_crc") == 2 and evidence.count("<li>") == 3
    inventory = re.search(r'<table class="gc-inventory" id="gc-inventory">(.*?)</table>', page, re.S).group(1)
    labels = re.findall(r'<tr><th class="gc-mono">(.*?)</th>', inventory)
    assert labels == ["gpu-[001-064] (64)"]  # one row for 64 nodes alike
    assert "8 × NVIDIA H100 80GB HBM3" in inventory and "575.57.08 / CUDA 12.9" in inventory
    assert "{'" not in page and "{&#39;" not in page


def test_the_synthetic_sample_is_the_builders_document():
    """docs/samples/results-64node-synthetic.json (tools/render-samples writes it) holds what
    synthetic_64_node_doc() builds: the browser tests and the docs show that document."""
    sample = json.loads((REPO / "docs" / "samples" / "results-64node-synthetic.json").read_text(encoding="utf-8"))

    def judged(doc: dict) -> list:
        return [
            (
                t["nodeid"],
                t["verdict"],
                t["problems"],
                [(m["where"], m["value"], m["status"]) for m in t["measurements"]],
            )
            for t in doc["tests"]
        ]

    built = synthetic_64_node_doc()
    assert judged(sample) == judged(built) and sample["nodes"] == built["nodes"]


def test_hostile_names_stay_text_on_a_large_cluster_too():
    evil = "<img src=x onerror=alert(1)>"
    names = [f"n{i}" for i in range(1, 20)] + [f"{evil}1", f"{evil}2"]
    tests = [
        _t(
            f"a::test_gpu[{n}]",
            ("fail" if n.endswith("2") else "warn") if evil in n else "pass",
            node=n,
            findings=[_f(f"{n}: {evil}", node=n, severity="fail" if n.endswith("2") else "warn")] if evil in n else [],
        )
        for n in names
    ]
    doc = {**_doc(tests, nodes=names), "inventory": {n: {"summary": {"os": evil}} for n in names}}
    page = html.render_page(codec.with_verdicts(doc))
    assert evil not in page and "&lt;img src=x onerror=alert(1)&gt;" in page
    assert 'id="gc-nodes-accepted"' in page and "n[1-19] (19 nodes)" in page


def test_pytest_html_filter_counts_are_named_in_the_suites_words():
    from pytest_gpucluster.report.pytest_html_hooks import relabel_outcomes

    outcomes = {
        "passed": {"label": "Passed", "value": 63},
        "skipped": {"label": "Skipped", "value": 13},
        "failed": {"label": "Failed", "value": 0},
    }
    relabel_outcomes(outcomes, {"pass": 62, "warn": 1, "not_judged": 0, "n/a": 13, "fail": 0})
    assert outcomes["passed"]["label"] == "Passed (62 passed, 1 passed with warnings)"
    assert outcomes["skipped"]["label"] == "Not applicable" and outcomes["failed"]["label"] == "Failed"
    relabel_outcomes(outcomes, {"pass": 63, "warn": 0, "not_judged": 2, "n/a": 11})
    assert outcomes["skipped"]["label"] == "Skipped (2 not judged, 11 not applicable)"


def test_the_results_tables_gpu_model_is_read_once_per_inventory():
    # Every row of pytest-html's table asks for the GPU model; it follows the inventory as it is
    # recorded, without walking every node's GPUs for each row.
    from types import SimpleNamespace

    from pytest_gpucluster.report.pytest_html_hooks import HtmlReportHooks

    results = ResultsDocument(profile="p", cluster={"gpu_model": "NVIDIA H100 80GB HBM3"})
    hooks = HtmlReportHooks(SimpleNamespace(results=results))  # type: ignore[arg-type]
    assert hooks._gpu_model() == "NVIDIA H100 80GB HBM3"  # the profile's, before any inventory
    results.inventory.update({f"node{i}": {"gpus": [{"name": "NVIDIA H200"}] * 8} for i in range(64)})
    assert hooks._gpu_model() == "NVIDIA H200"
    results.inventory.update({"node64": {"gpus": [{"name": "NVIDIA B200"}]}})
    assert hooks._gpu_model() == "NVIDIA H100 80GB HBM3"  # two models: the profile's again

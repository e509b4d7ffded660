"""The report's pure parts: verdict rule, node attribution, readable properties, HTML escaping, plots."""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path

from pytest_gpucluster.config import Threshold
from pytest_gpucluster.report import html, model, plots
from pytest_gpucluster.results import ResultsDocument
from pytest_gpucluster.selection import Selection
from pytest_gpucluster.verdict import Measurement, judge

REPO = Path(__file__).resolve().parents[2]


def _m(metric, value, status, where, **threshold):
    unit = {"gpu.temperature": "C"}.get(metric, "GB/s")
    return {
        "kind": "measurement",
        "metric": metric,
        "value": value,
        "unit": unit,
        "where": where,
        "detail": "",
        "status": status,
        "sentence": f"{where}: {metric} = {value}",
        "threshold": threshold,
    }


def _t(nodeid, verdict, measurements=(), params="", message="", area="x", problems=()):
    name = nodeid.split("::")[-1].split("[")[0]
    return {
        "nodeid": nodeid,
        "area": area,
        "name": name,
        "params": params,
        "verdict": verdict,
        "series": [],
        "measurements": list(measurements),
        "message": message,
        "problems": list(problems),
    }


def _doc(tests, status="complete", nodes=("node1", "node2", "node10")):
    return {"status": status, "nodes": list(nodes), "tests": tests, "environment": {}, "inventory": {}}


def _sel(required, not_selected=(), not_applicable=None, named=()):
    return {
        "required": list(required),
        "not_selected": list(not_selected),
        "named": list(named),
        "not_applicable": dict(not_applicable or {}),
        "optional": [],
    }


def test_any_failure_rejects_even_an_interrupted_run_and_names_the_culprit():
    tests = [_t("a::t1", "pass"), _t("a::t2", "fail", message="Failed: node2 slow")]
    acc = model.acceptance(_doc(tests, "interrupted"))
    assert acc.verdict == "REJECTED" and acc.reasons == ("node2 slow (a::t2)",)
    assert acc.headline == "REJECTED: 1 check failed"


def test_a_cluster_error_reads_as_its_sentence_without_the_exception_path():
    lost = _t(
        "a::t2",
        "fail",
        message="pytest_gpucluster.errors.NodeLostError: job 1 (x-nccl-inter) on node1, "
        "node2: lost its node(s) while RUNNING: node2 is DOWN\nlogs: ...",
    )
    acc = model.acceptance(_doc([lost]))
    expected = "job 1 (x-nccl-inter) on node1, node2: lost its node(s) while RUNNING: node2 is DOWN (a::t2)"
    assert acc.reasons == (expected,)


def test_every_problem_of_a_failure_is_a_reason_not_only_the_first_line():
    failed = _t(
        "x/test_slurm_health.py::test_nodes_are_usable",
        "fail",
        message="Failed: nodes of partition 'debug' are not usable:\n- node2: DRAIN (bad DIMM)",
        problems=["node2: DRAIN (bad DIMM)", "node3: DOWN (not responding)"],
    )
    acc = model.acceptance(_doc([failed]))
    assert acc.reasons == (
        "node2: DRAIN (bad DIMM) (test_slurm_health.py::test_nodes_are_usable)",
        "node3: DOWN (not responding) (test_slurm_health.py::test_nodes_are_usable)",
    )


def test_a_required_check_skipped_or_not_reached_is_incomplete():
    assert model.acceptance(_doc([_t("a::t1", "pass")], "interrupted")).verdict == "INCOMPLETE"
    tests = [_t("a::t1", "pass"), _t("b::t2", "skip", message="Skipped: node2 is excluded: DRAIN")]
    acc = model.acceptance({**_doc(tests), "selection": _sel(["a::t1", "b::t2", "c::t3"])})
    assert acc.verdict == "INCOMPLETE"
    assert acc.reasons == ("b::t2: skipped: node2 is excluded: DRAIN", "c::t3: not reached (the run ended before it)")
    assert model.acceptance(_doc([])).verdict == "INCOMPLETE"


def test_an_error_of_the_harness_is_incomplete_an_error_of_the_cluster_rejects():
    harness = _t("a::t2", "error", message="AttributeError: 'NoneType' object has no attribute 'x'")
    acc = model.acceptance(
        {
            **_doc([_t("a::t1", "pass"), {**harness, "unjudged": "AttributeError"}]),
            "selection": _sel(["a::t1", "a::t2"]),
        }
    )
    assert acc.verdict == "INCOMPLETE" and acc.reasons[0].startswith("a::t2: could not be judged (AttributeError)")
    cluster = _t("a::t2", "error", message="LaunchError: job 7 on node2: submission refused")
    assert model.acceptance(_doc([_t("a::t1", "pass"), cluster])).verdict == "REJECTED"


def test_not_applicable_is_neither_a_pass_nor_missing():
    tests = [_t("a::t1", "pass"), _t("b::t2", "n/a", message="Skipped: not applicable: profile has 1 node")]
    acc = model.acceptance({**_doc(tests), "selection": _sel(["a::t1"], not_applicable={"b::t2": "1 node"})})
    assert acc.verdict == "ACCEPTED" and acc.counts["n/a"] == 1 and acc.not_applicable == ("b::t2: 1 node",)
    only_na = model.acceptance({**_doc([tests[1]]), "selection": _sel([], not_applicable={"b::t2": "1 node"})})
    assert only_na.verdict == "INCOMPLETE" and only_na.reasons == ("no acceptance check passed",)


def test_a_narrower_selection_is_partial_never_accepted():
    tests = [_t("a::t1", "pass")]
    acc = model.acceptance({**_doc(tests), "selection": _sel(["a::t1", "b::t2", "b::t3"], ["b::t2", "b::t3"])})
    assert acc.verdict == "PARTIAL"
    assert acc.headline == "PARTIAL: 1 selected check passed; 2 required checks not selected"
    named = model.acceptance({**_doc(tests), "selection": _sel(["a::t1"], named=["tests/acceptance/test_a.py"])})
    assert named.verdict == "PARTIAL" and "the command line names tests/acceptance/test_a.py" in named.reasons[0]
    failed = model.acceptance({**_doc([_t("a::t1", "fail", message="x")]), "selection": _sel(["a::t1", "b"], ["b"])})
    assert failed.verdict == "REJECTED"


def test_warnings_accept_and_are_counted_in_the_headline():
    warned = {**_t("a::t1", "warn"), "warnings": ["node1: device cgroups are off"]}
    acc = model.acceptance(_doc([warned, _t("a::t2", "pass")]))
    assert acc.verdict == "ACCEPTED" and acc.counts["warn"] == 1 and acc.counts["pass"] == 1
    assert acc.headline == "ACCEPTED, 1 warning" and acc.warnings == ("node1: device cgroups are off (a::t1)",)


def test_each_node_gets_its_verdict_and_the_rejected_ones_a_hostlist():
    tests = [
        _t("a::test_gpu[gpu-03]", "fail", params="gpu-03", problems=["gpu-03: mlx5_2 port 1 is DOWN"]),
        _t("a::test_gpu[gpu-11]", "pass", params="gpu-11"),
        _t("a::test_gpu[gpu-12]", "skip", params="gpu-12", message="Skipped: no result"),
        _t("a::test_bw", "fail", [_m("nccl.x", 0, "fail", "gpu-11:gpu1")]),
        _t("a::test_fabric", "fail", message="all_reduce across nodes = 12 GB/s is below the fail line"),
    ]
    doc = {
        **_doc(tests, nodes=("gpu-03", "gpu-11", "gpu-12", "gpu-13")),
        "environment": {"lost_nodes": {"gpu-13": {"why": "DOWN", "when": "t", "job": "7", "how": "x"}}},
    }
    nodes = model.node_verdicts(doc, "REJECTED")
    verdicts = {v.node: v.verdict for v in nodes.verdicts}
    assert verdicts == {"gpu-03": "REJECTED", "gpu-11": "REJECTED", "gpu-12": "INCOMPLETE", "gpu-13": "REJECTED"}
    assert nodes.exclude == "gpu-[03,11,13]"
    assert nodes.summary == (
        "0 of 4 nodes accepted; rejected: gpu-[03,11,13]; not judged in full: gpu-12; 1 failure(s) name no single node"
    )
    assert nodes.cluster_wide == ("test_fabric: fail: all_reduce across nodes = 12 GB/s is below the fail line",)
    by_node = {v.node: v.reasons for v in nodes.verdicts}
    # the problem once, with the check that found it; not again without it
    assert by_node["gpu-03"] == ("gpu-03: mlx5_2 port 1 is DOWN (test_gpu[gpu-03])",)
    assert by_node["gpu-13"] == ("gpu-13: lost during the run: DOWN",)


def test_a_counter_family_is_one_reason_per_node_and_cause_in_results_and_node_verdicts():
    crc = [
        f"{n}:gpu{g} link {link}: nvlink_crc_flit_errors rose 0 → {1 + link} (+{1 + link}, at most +0 allowed)"
        for n in ("node1", "node10")
        for g in range(4)
        for link in range(18)
    ]
    tests = [
        _t("a::test_fabric[node1]", "fail", params="node1", problems=[*crc[:72], "node1: mlx5_0 port 1 is DOWN"]),
        _t("a::test_fabric[node10]", "fail", params="node10", problems=crc[72:]),
        _t("a::test_fabric[node2]", "pass", params="node2"),
    ]
    doc = _doc(tests)
    acc = model.acceptance(doc)
    line = "gpu0–3 link 0–17: nvlink_crc_flit_errors rose 0 → 1–18 (+1–18, at most +0 allowed)"
    assert acc.reasons == (
        f"node1:{line} (a::test_fabric[node1]) (×72)",
        "node1: mlx5_0 port 1 is DOWN (a::test_fabric[node1])",
        f"node10:{line} (a::test_fabric[node10]) (×72)",
    )
    assert [(f.count, f.nodeid) for f in acc.findings] == [
        (72, "a::test_fabric[node1]"),
        (1, "a::test_fabric[node1]"),
        (72, "a::test_fabric[node10]"),
    ]
    reasons = {v.node: v.reasons for v in model.node_verdicts(doc, acc.verdict).verdicts}
    assert reasons["node1"] == (
        f"node1:{line} (test_fabric[node1]) (×72)",
        "node1: mlx5_0 port 1 is DOWN (test_fabric[node1])",
    )
    assert reasons["node10"] == (f"node10:{line} (test_fabric[node10]) (×72)",)
    assert reasons["node2"] == ()


def test_a_failed_pair_convicts_only_the_node_its_isolation_names():
    undetermined = _m("nccl.all_reduce.inter_node", 1.4, "fail", "node1+node2")
    undetermined["sentence"] = (
        "node1+node2: nccl.all_reduce.inter_node (...; isolation: could not isolate node1, "
        "node2: with two nodes ...) = 1.4 GB/s is below the fail line 5 GB/s"
    )
    nodes = model.node_verdicts(_doc([_t("a::test_across", "fail", [undetermined])], nodes=("node1", "node2")))
    assert {v.node: v.verdict for v in nodes.verdicts} == {"node1": "ACCEPTED", "node2": "ACCEPTED"}
    assert nodes.cluster_wide == (undetermined["sentence"],)
    isolated = {
        **undetermined,
        "sentence": "node1+node2+node3: x (isolation: bad node(s): node3 (failed when "
        "paired with a known-good node)) = 1 GB/s is below the fail line 5 GB/s",
    }
    isolated["where"] = "node1+node2+node3"
    doc = _doc([_t("a::test_across", "fail", [isolated])], nodes=("node1", "node2", "node3"))
    verdicts = {v.node: v.verdict for v in model.node_verdicts(doc).verdicts}
    assert verdicts == {"node1": "ACCEPTED", "node2": "ACCEPTED", "node3": "REJECTED"}


def test_hostlist_is_what_sbatch_exclude_takes():
    assert model.hostlist(["node2"]) == "node2"
    assert model.hostlist(["gpu-03", "gpu-11", "gpu-12"]) == "gpu-[03,11-12]"
    assert model.hostlist(["node1", "node2", "node10"]) == "node[1-2],node10"
    assert model.hostlist([]) == ""


def test_matrix_puts_results_on_the_node_they_name():
    tests = [
        _t("a::test_gpu[node2]", "fail", params="node2"),
        _t("a::test_bw", "fail", [_m("nccl.x", 1, "pass", "node1:gpu0"), _m("nccl.x", 0, "fail", "node10:gpu1")]),
        _t("a::test_whole", "error", message="job 7 vanished"),
        _t("a::test_ib", "fail", problems=["node1: mlx5_0 port 1 is DOWN"]),
    ]
    m = model.matrix(_doc(tests))
    assert m.rows == ("node1", "node2", "node10", model.CLUSTER_ROW)
    status = {(r, c[1]): m.cell(r, c).status for r in m.rows for c in m.columns}
    assert status[("node2", "test_gpu")] == "fail" and status[("node1", "test_gpu")] == "none"
    assert status[("node1", "test_bw")] == "pass" and status[("node10", "test_bw")] == "fail"
    assert status[(model.CLUSTER_ROW, "test_bw")] == "none"  # explained by node10
    assert status[(model.CLUSTER_ROW, "test_whole")] == "error"
    assert status[("node1", "test_ib")] == "fail"
    assert model.nodes_in("node10:gpu1", ["node1", "node10"]) == ["node10"]


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
                problems=[evil],
            )
        ]
    )
    doc["tests"][0]["logs"] = [{"job_id": "1", "path": "/x", "tail": evil}]
    page = html.render_page(doc)
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

    def measured(t: Threshold, value: float, where: str) -> dict:
        return {"kind": "measurement", **judge(Measurement(t.metric, value, t.unit, where=where), t).to_json()}

    def add(nodeid: str, outcome: str, measurements=(), problems=(), message: str = "") -> None:
        rec = doc.record(nodeid)
        rec.outcome, rec.measurements, rec.problems, rec.message = outcome, list(measurements), list(problems), message
        rec.duration_s = 12.0

    acceptance = "tests/acceptance"
    for n in NODES_64:
        temps = [
            measured(
                temp, 88 if (n, g) == ("gpu-017", 3) else 78 if (n, g) == ("gpu-042", 0) else 41 + g, f"{n}:gpu{g}"
            )
            for g in range(8)
        ]
        hot = n == "gpu-017"
        add(
            f"{acceptance}/test_gpu_health.py::test_gpu_health[{n}]",
            "failed" if hot else "passed",
            temps,
            message="Failed: gpu-017:gpu3: gpu.temperature = 88 C is above the fail line 85 C" if hot else "",
        )
        down = n == "gpu-051"
        add(
            f"{acceptance}/test_infiniband.py::test_ib_ports_active[{n}]",
            "failed" if down else "passed",
            problems=[f"{n}: mlx5_3 port 1 is DOWN"] if down else [],
            message=f"Failed: {n}: mlx5_3 port 1 is DOWN" if down else "",
        )
        add(
            f"{acceptance}/test_nccl.py::test_all_reduce_intra_node[{n}]",
            "passed",
            [measured(busbw, 361.0 + int(n[-3:]) % 7, n)],
        )
        skipped = n == "gpu-060"
        add(
            f"{acceptance}/test_dcgm.py::test_dcgm_diagnostics[{n}]",
            "skipped" if skipped else "passed",
            message=f"Skipped: dcgmi is not installed on {n}" if skipped else "",
        )
        # NVLink CRC errors on every link of four GPUs: one sentence per link and counter, as a
        # fabric check writes them; the report folds them into one line per node and counter.
        crc = [
            f"{n}:gpu{g} link {link}: nvlink_crc_{kind}_errors rose 0 → {3 + g * link} "
            f"(+{3 + g * link}, at most +0 allowed) over 41 min 7 s"
            for g in range(4)
            for link in range(18)
            for kind in ("flit", "data")
        ]
        add(
            f"{acceptance}/test_fabric.py::test_fabric_error_counters_did_not_rise[{n}]",
            "failed" if down else "passed",
            problems=crc if down else [],
            message=f"Failed: {'; '.join(crc[:2])} ..." if down else "",
        )
    speed = [
        measured(tflops, 410.0 if (n, g) == ("gpu-033", 5) else 702.0 + g, f"{n}:gpu{g}")
        for n in NODES_64
        for g in range(8)
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
            measured(
                Threshold("nccl.all_reduce.inter_node", "GB/s", fail_below=300, source="thresholds.h100"),
                371.5,
                "all nodes",
            )
        ],
    )
    doc.selection = Selection(required=list(doc.tests))
    return doc.to_json()


def test_a_64_node_report_names_the_bad_nodes_and_stays_compact():
    doc = synthetic_64_node_doc()
    nodes = model.node_verdicts(doc, model.acceptance(doc).verdict)
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
    assert labels == ["gpu-017", "gpu-033", "gpu-051", "gpu-060", "gpu-042", clean, model.CLUSTER_ROW]
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
            "fail" if n.endswith("2") and evil in n else "pass",
            params=n,
            problems=[f"{n}: {evil}"] if evil in n else [],
        )
        for n in names
    ]
    doc = {**_doc(tests, nodes=names), "inventory": {n: {"summary": {"os": evil}} for n in names}}
    page = html.render_page(doc)
    assert evil not in page and "&lt;img src=x onerror=alert(1)&gt;" in page
    assert 'id="gc-nodes-accepted"' in page and "n[1-9],n[10-19] (19 nodes)" in page


def test_a_failure_caused_by_a_lost_node_leaves_the_healthy_node_incomplete_not_rejected():
    """node2 died before the run: node1's per-node jobs that spanned node2, and the comparison
    left with one node, failed because of node2. node2 is rejected; node1 is not judged in full."""
    tests = [
        _t("a::test_probe[node1]", "fail", params="node1", message="x-intra: not submitted: node2: unreachable"),
        _t("a::test_alike[node1]", "error", params="node1", message="1 node(s) left after losing node2: DOWN"),
        _t("a::test_probe[node2]", "error", params="node2", message="node2 was lost earlier in this run"),
        _t("a::test_mem[node1]", "pass", params="node1"),
    ]
    doc = {
        **_doc(tests, nodes=("node1", "node2")),
        "environment": {"lost_nodes": {"node2": {"why": "unreachable", "when": "t", "job": "7", "how": "x"}}},
    }
    nodes = model.node_verdicts(doc, "REJECTED")
    assert {v.node: v.verdict for v in nodes.verdicts} == {"node1": "INCOMPLETE", "node2": "REJECTED"}
    assert nodes.exclude == "node2"
    node1 = next(v for v in nodes.verdicts if v.node == "node1")
    assert all(r.startswith("not judged: node2 lost or left out") for r in node1.reasons), node1.reasons
    # A failure of node1's own still rejects it.
    own = [*tests, _t("a::test_gpu[node1]", "fail", params="node1", problems=["node1:gpu0: ECC errors"])]
    doc = {**doc, **_doc(own, nodes=("node1", "node2")), "environment": doc["environment"]}
    assert {v.node: v.verdict for v in model.node_verdicts(doc).verdicts}["node1"] == "REJECTED"


def test_pytest_html_filter_counts_are_named_in_the_suites_words():
    from pytest_gpucluster.report.pytest_html_hooks import relabel_outcomes

    outcomes = {
        "passed": {"label": "Passed", "value": 63},
        "skipped": {"label": "Skipped", "value": 13},
        "failed": {"label": "Failed", "value": 0},
    }
    relabel_outcomes(outcomes, {"pass": 62, "warn": 1, "skip": 0, "n/a": 13, "fail": 0})
    assert outcomes["passed"]["label"] == "Passed (62 passed, 1 passed with warnings)"
    assert outcomes["skipped"]["label"] == "Not applicable" and outcomes["failed"]["label"] == "Failed"
    relabel_outcomes(outcomes, {"pass": 63, "warn": 0, "skip": 2, "n/a": 11})
    assert outcomes["skipped"]["label"] == "Skipped (2 skipped, 11 not applicable)"


def test_the_not_applicable_list_and_count_are_the_same_checks():
    # Known at collection and run (n/a), found when it ran (n/a, not in the selection), known at
    # collection but deselected (no record): the run's n/a are the first two, counted and listed.
    tests = [
        _t("a::t1", "pass"),
        _t("a::t2[node2]", "n/a", params="node2", message="Skipped: not applicable: profile 'ci' has GRES-only GPUs"),
        _t("b::t3", "n/a", message="Skipped: not applicable: nvbandwidth is not installed on node1"),
    ]
    sel = _sel(["a::t1"], not_applicable={"a::t2[node2]": "GRES-only GPUs", "c::t4": "1 node"})
    acc = model.acceptance({**_doc(tests), "selection": sel})
    assert acc.counts["n/a"] == len(acc.not_applicable) == 2
    assert acc.not_applicable == ("a::t2[node2]: GRES-only GPUs", "b::t3: nvbandwidth is not installed on node1")

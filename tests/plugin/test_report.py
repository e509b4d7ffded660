"""The acceptance report, results file and JUnit properties as a customer gets them: pytester runs
of small acceptance suites using the real fixtures (judge, record, gpucluster) and the local
executor."""

from __future__ import annotations

import hashlib
import json
import re
import socket
import sys
import xml.etree.ElementTree as ET
from html import unescape

import pytest

from pytest_gpucluster.report.html import PRINT_SCRIPT
from pytest_gpucluster.verdict.ranges import hostlist

# Three "nodes" named through measurement places; one slow GPU on node2, one hot GPU on node3, a
# job whose workload crashes (log tail), a place name that tries to inject a script, a skip.
SUITE = """
import pytest
from pytest_gpucluster.verdict import Measurement
from pytest_gpucluster.workloads.placement import report_placement

NODES = ["node1", "node2", "node3"]

def test_gpu_speed(judge):
    values = {f"{n}:gpu{g}": 0.9 + 0.01 * g for n in NODES for g in range(4)}
    values["node2:gpu3"] = 0.12
    judge.all([Measurement("compute.fraction_of_node_median", v, "ratio", where=w) for w, v in values.items()])

@pytest.mark.parametrize("host", NODES)
def test_gpu_temperature(judge, host):
    hot = 40 if host == "node3" else 0
    judge.all([Measurement("gpu.temperature", 40 + g + (hot if g == 1 else 0), "C", where=f"{host}:gpu{g}")
               for g in range(4)])

def test_bandwidth_sweep(gpucluster, judge, record):
    res = gpucluster.run(report_placement, gpucluster.spec("sweep", gpus_per_node=0))
    for n in NODES[:2]:
        record("series", name="all_reduce busbw", where=n, x_label="bytes", y_label="busbw (GB/s)",
               points=[[2**k, 0.001 * k] for k in range(10, 20)], threshold=0.005, x_log=True)
    judge(Measurement("nccl.all_reduce.intra_node", 0.05, "GB/s", where="node1", job_id=res[0].job_id))

def _crash(ctx):
    import sys
    print("loading the <b>model</b>", file=sys.stderr)
    raise RuntimeError("CUDA error: an illegal memory access was encountered")

def test_job_that_crashes(gpucluster):
    gpucluster.run(_crash, gpucluster.spec("crash", gpus_per_node=0))

def test_place_name_is_escaped(judge):
    judge(Measurement("gpu.temperature", 99, "C", where="node2:<script>alert(1)</script>"))

@pytest.mark.gpu(8)
def test_needs_eight_gpus():
    pass
"""

PASSING = """
from pytest_gpucluster.verdict import Measurement

def test_temperatures(judge):
    judge.all([Measurement("gpu.temperature", 40 + g, "C", where=f"node1:gpu{g}") for g in range(4)])

def test_speed(judge):
    judge.all([Measurement("compute.fraction_of_node_median", SPEED, "ratio", where=f"node1:gpu{g}")
               for g in range(4)])
"""


def _summary(html: str) -> str:
    return html.split('id="results-table"')[0]


def test_report_shows_verdict_facts_matrix_plots_and_failures(gpc):
    gpc.makepyfile(test_cluster=SUITE)
    result = gpc.runpytest_subprocess(
        "--html=out/report.html",
        "--self-contained-html",
        "--gpucluster-results=out/results.json",
        "--junitxml=out/junit.xml",
    )
    result.assert_outcomes(passed=4, failed=3)
    result.stdout.fnmatch_lines(["*gpucluster: REJECTED: 3 checks failed (3 pass, 1 warn, 3 fail, 1 n/a)*"])
    html = (gpc.path / "out" / "report.html").read_text()
    assert not (gpc.path / "out" / "assets").exists()  # one file, nothing beside it

    summary = _summary(html)
    assert '<div class="gc-word">REJECTED</div>' in summary
    for fact in ("Cluster profile", "local", "Nodes", "GPUs", "1 node, no GPU devices (cpu)", "Run status", "complete"):
        assert fact in summary
    chips = ("3 passed", "1 passed with warnings", "3 failed", "0 not judged", "1 not applicable")
    assert all(f">{chip}</span>" in summary for chip in chips)
    assert "<h3>Not applicable to this profile</h3>" in summary
    assert "this check needs 8 (1: test_cluster.py::test_needs_eight_gpus)" in summary
    assert "node2:gpu3: compute.fraction_of_node_median = 0.12 ratio is below the fail line 0.3 ratio" in summary

    # environment: versions in a fixed order, the thresholds file and its checksum
    versions = re.search(r'<table class="gc-facts" id="gc-versions">(.*?)</table>', html, re.S).group(1)
    labels = re.findall(r"<tr><th>(.*?)</th>", versions)
    assert labels[:9] == [
        "pytest-gpucluster",
        "Python",
        "PyTorch",
        "NCCL",
        "CUDA",
        "NVIDIA driver",
        "Slurm",
        "submitit",
        "pytest",
    ]
    assert "not recorded" in versions  # no GPU check recorded a driver here
    doc = json.loads((gpc.path / "out" / "results.json").read_text())
    assert doc["thresholds_sha256"] in versions and re.fullmatch(r"[0-9a-f]{64}", doc["thresholds_sha256"])

    # node × check matrix: node2 red for speed, node3 amber for temperature, the crash on the one
    # node that ran it (this machine, the local profile's node)
    matrix = re.search(r'<table class="gc-matrix" id="gc-matrix">(.*?)</table>', html, re.S).group(1)
    rows = {m.group(1): m.group(2) for m in re.finditer(r'<tr><th class="gc-mono">(.*?)</th>(.*?)</tr>', matrix, re.S)}
    here = socket.gethostname()
    assert list(rows) == [here, "node1", "node2", "node3", "(cluster-wide)"]
    statuses = {row: re.findall(r'gc-cell gc-s-(\w+)"', cells) for row, cells in rows.items()}
    columns = re.findall(r'<th class="gc-col">(.*?)</th>', matrix)
    assert columns == [
        "gpu_speed",
        "gpu_temperature",
        "bandwidth_sweep",
        "job_that_crashes",
        "place_name_is_escaped",
        "needs_eight_gpus",
    ]
    assert statuses["node1"][:3] == ["pass", "pass", "pass"]
    assert statuses["node2"][0] == "fail"
    assert statuses["node3"][1] == "warn"
    assert statuses[here][3] == "fail"
    # a place that is no node name is on no node; a check with no node that does not apply neither
    assert statuses["(cluster-wide)"][4:] == ["fail", "na"]

    # plots: the series with its threshold line and a spread plot per repeated metric, inline
    plots = re.findall(r'<img alt="([^"]*)" src="data:image/svg\+xml;base64,', html)
    assert plots == ["all_reduce busbw", "compute.fraction_of_node_median by place", "gpu.temperature by place"]

    # results table: the extra columns, the worst measurement of a row, the job id
    for column in ("Measured", "Threshold", "Verdict", "Node/GPU", "Job"):
        assert f">{column}</th>" in html
    sweep = next(t for t in doc["tests"] if t["name"] == "test_bandwidth_sweep")
    assert len(sweep["job_ids"]) == 1
    data = json.loads(unescape(re.search(r'data-jsonblob="(.*?)"', html).group(1)))
    row = data["tests"][sweep["nodeid"]][0]["resultsTableRow"]
    assert '<td class="col-measured">0.05 GB/s</td>' in row
    assert f'<td class="col-jobs">{sweep["job_ids"][0]}</td>' in row

    # the crash: its row carries the end of the job's stderr, escaped
    crash = next(t for t in doc["tests"] if t["name"] == "test_job_that_crashes")
    assert crash["logs"] and crash["logs"][0]["path"].endswith(f"{crash['job_ids'][0]}_0_log.err")
    assert "CUDA error: an illegal memory access" in crash["logs"][0]["tail"]
    extras = data["tests"][crash["nodeid"]][0]["extras"]
    assert "loading the &lt;b&gt;model&lt;/b&gt;" in extras[0]["content"]

    # one voice: the check that does not apply is a row of its reason, not pytest's tuple
    # (path, line, message), and the run's count of checks that ran is pytest-html's count
    skipped = next(t for t in doc["tests"] if t["name"] == "test_needs_eight_gpus")
    assert skipped["nodeid"] not in data["tests"]
    group = data["tests"]["gpucluster-not-applicable-1"][0]
    assert unescape(group["testId"]).startswith("1 check not applicable: profile 'local' has ")
    assert "test_cluster.py::test_needs_eight_gpus" in group["extras"][0]["content"]
    assert not re.search(r"\(['\"].*?, \d+, ['\"]", unescape(json.dumps(data)))
    ran = sum(1 for t in doc["tests"] if t["outcome"] in ("passed", "failed"))
    assert f"{len(doc['tests'])} checks in 1 area: {ran} ran, 1 not applicable;" in summary
    assert f"{ran} tests took" in html

    # a place name is text, never markup
    assert "<script>alert(1)</script>" not in html.replace("\\u003cscript", "")
    assert "node2:&lt;script&gt;alert(1)&lt;/script&gt;" in html


def test_results_file_carries_measurements_with_thresholds_and_the_verdict(gpc):
    gpc.makepyfile(test_cluster=SUITE)
    gpc.runpytest_subprocess("--gpucluster-results=results.json")
    doc = json.loads((gpc.path / "results.json").read_text())
    assert doc["schema_version"] == 2 and doc["status"] == "complete"
    assert doc["acceptance"]["verdict"] == "REJECTED"
    assert doc["acceptance"]["counts"] == {
        "pass": 3,
        "warn": 1,
        "fail": 3,
        "xfail": 0,
        "xpass": 0,
        "n/a": 1,
        "not_judged": 0,
        "fault": 0,
        "interrupted": 0,
    }
    assert doc["cluster"]["profile"] == "local" and doc["cluster"]["gpu_model"] == "cpu"
    speed = next(t for t in doc["tests"] if t["name"] == "test_gpu_speed")
    assert (speed["area"], speed["verdict"]) == ("cluster", "fail")
    slow = next(m for m in speed["measurements"] if m["where"] == "node2:gpu3")
    assert slow["value"] == 0.12 and slow["status"] == "fail" and slow["unit"] == "ratio"
    assert slow["threshold"]["fail_below"] == 0.3 and slow["threshold"]["warn_below"] == 0.5
    assert "thresholds.cpu.compute.fraction_of_node_median" in slow["threshold"]["source"]
    temp = next(t for t in doc["tests"] if t["nodeid"].endswith("test_gpu_temperature[node3]"))
    assert (temp["params"], temp["verdict"]) == ("node3", "warn")


def test_junit_xml_carries_the_verdict_on_the_suite_and_stays_xunit2(gpc):
    gpc.makepyfile(test_cluster=SUITE)
    gpc.runpytest_subprocess("--junitxml=junit.xml")
    root = ET.parse(gpc.path / "junit.xml").getroot()
    suite = root.find("testsuite")
    props = {p.get("name"): p.get("value") for p in suite.find("properties").iter("property")}
    assert props["gpucluster.verdict"] == "REJECTED"
    assert props["gpucluster.headline"].startswith("REJECTED: 3 checks failed")
    assert props["gpucluster.profile"] == "local" and len(props["gpucluster.thresholds_sha256"]) == 64
    # the crash is the one node's that ran it: this machine
    rejected = hostlist(["node2", socket.gethostname()])
    assert props["gpucluster.nodes"] == f"2 of 4 nodes accepted; rejected: {rejected}; 1 failure(s) name no single node"
    assert props["gpucluster.exclude"] == rejected
    # xunit2 (the default family) allows no properties on a test case
    assert not [case.get("name") for case in root.iter("testcase") if case.find("properties") is not None]


def test_junit_xml_has_one_readable_property_per_measurement(gpc):
    gpc.makepyfile(test_cluster=SUITE)
    gpc.runpytest_subprocess("--junitxml=junit.xml", "-o", "junit_family=xunit1")
    root = ET.parse(gpc.path / "junit.xml").getroot()
    props = {}
    for case in root.iter("testcase"):
        props[case.get("name")] = [(p.get("name"), p.get("value")) for p in case.iter("property")]
    slow = ("compute.fraction_of_node_median[node2:gpu3]", "0.12 ratio fail (fail < 0.3 ratio, warn < 0.5 ratio)")
    assert slow in props["test_gpu_speed"]
    hot = ("gpu.temperature[node3:gpu1]", "81 C warn (fail > 85 C, warn > 75 C)")
    assert hot in props["test_gpu_temperature[node3]"]
    jobs = [v for k, v in props["test_bandwidth_sweep"] if k == "gpucluster.job"]
    assert len(jobs) == 1 and re.match(r"\d+ \w+-sweep ", jobs[0])
    everything = [v for values in props.values() for _, v in values]
    assert not any(v.startswith("{") for v in everything)  # no dict reprs


def test_xdist_run_gives_one_complete_report_and_results_file(gpc):
    gpc.makepyfile(test_cluster=SUITE)
    result = gpc.runpytest_subprocess(
        "-n", "2", "--html=report.html", "--self-contained-html", "--gpucluster-results=r.json"
    )
    result.assert_outcomes(passed=4, failed=3)
    doc = json.loads((gpc.path / "r.json").read_text())
    assert doc["status"] == "complete" and len(doc["tests"]) == 8
    crash = next(t for t in doc["tests"] if t["name"] == "test_job_that_crashes")
    assert crash["logs"], "the worker read the log tail before its job folder went away"
    html = (gpc.path / "report.html").read_text()
    assert '<div class="gc-word">REJECTED</div>' in html
    assert html.count('<figure class="gc-plot">') == 3
    for t in doc["tests"]:
        assert t["nodeid"].replace("/", "\\/") in html or t["nodeid"] in html


def test_passing_run_is_accepted(gpc):
    gpc.makepyfile(test_cluster=PASSING.replace("SPEED", "0.95"))
    result = gpc.runpytest_subprocess("--html=report.html", "--gpucluster-results=r.json")
    assert result.ret == 0
    assert json.loads((gpc.path / "r.json").read_text())["acceptance"]["verdict"] == "ACCEPTED"
    page = (gpc.path / "report.html").read_text()
    assert '<div class="gc-word">ACCEPTED</div>' in page
    # the sheet states the results file as written, by its sha256, and has room to sign
    digest = hashlib.sha256((gpc.path / "r.json").read_bytes()).hexdigest()
    assert f'sha256 <span class="gc-mono gc-hash">{digest}</span>' in page and 'class="gc-signatures"' in page


def test_interrupted_run_is_incomplete(gpc):
    gpc.makepyfile(
        test_cluster=PASSING.replace("SPEED", "0.95") + "\ndef test_zz_interrupted():\n    raise KeyboardInterrupt\n"
    )
    result = gpc.runpytest_subprocess("--html=report.html", "--self-contained-html", "--gpucluster-results=r.json")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    doc = json.loads((gpc.path / "r.json").read_text())
    assert doc["status"] == "interrupted" and doc["acceptance"]["verdict"] == "INCOMPLETE"
    assert [t["verdict"] for t in doc["tests"]] == ["pass", "pass", "interrupted"]
    html = (gpc.path / "report.html").read_text()
    assert '<div class="gc-word">INCOMPLETE</div>' in html
    assert "the run did not finish (status: interrupted)" in html


def test_a_check_that_does_not_apply_leaves_the_run_accepted(gpc):
    gpc.makepyfile(
        test_compute=PASSING.replace("SPEED", "0.95"),
        test_nccl="import pytest\n@pytest.mark.across_nodes\ndef test_across_nodes():\n    pass\n",
    )
    gpc.runpytest_subprocess("--gpucluster-results=r.json")
    acc = json.loads((gpc.path / "r.json").read_text())["acceptance"]
    assert acc["verdict"] == "ACCEPTED"
    assert acc["not_applicable"] == ["test_nccl.py::test_across_nodes: profile 'local' has 1 node; this check needs 2"]


def test_standalone_report_from_a_results_file(gpc):
    gpc.makepyfile(test_cluster=SUITE)
    gpc.runpytest_subprocess("--gpucluster-results=r.json")
    run = gpc.run(sys.executable, "-m", "pytest_gpucluster.report", "r.json", "-o", "page.html")
    assert run.ret == 1 and "REJECTED: 3 checks failed: page.html" in run.stdout.str()
    page = (gpc.path / "page.html").read_text()
    assert 'id="gc-matrix"' in page and "data:image/svg+xml;base64," in page and 'id="gc-results"' in page
    # the run's script is text; the page's one script is its own, which opens folded lists to print
    assert "node2:&lt;script&gt;" in page and page.count("<script>") == 1 and PRINT_SCRIPT in page

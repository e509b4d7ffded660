"""The metrics file (results/metrics.py) of recorded results files, read back by prometheus_client's
parser of the text format: the run's and each node's verdict, every figure where it was measured
with its lines, no series twice, label values escaped."""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from pytest_gpucluster.results import codec, metrics

SAMPLES = Path(__file__).resolve().parents[2] / "docs" / "samples"
# The 2 x 2 H200 split with GEMMs on node2's GPU 0 outside Slurm: REJECTED naming node2:gpu0.
GEMM_NODE2 = SAMPLES / "results-2x2-h200-gemm-node2.json"


def _parsed(text: str) -> dict[str, list]:
    return {f.name: f.samples for f in text_string_to_metric_families(text)}


def _one(samples: list, **labels: str) -> float:
    (value,) = [s.value for s in samples if all(s.labels.get(k) == v for k, v in labels.items())]
    return value


def test_a_rejected_node_and_its_gpu_are_in_the_metrics_with_the_line():
    doc = codec.load(GEMM_NODE2)
    text = metrics.exposition(doc)
    parsed = _parsed(text)
    assert _one(parsed["gpucluster_run_verdict"], verdict="REJECTED") == 1
    assert _one(parsed["gpucluster_run_verdict"], verdict="ACCEPTED") == 0
    nodes = parsed["gpucluster_node_verdict"]
    assert _one(nodes, node="node2", verdict="REJECTED") == 1 and _one(nodes, node="node1", verdict="ACCEPTED") == 1
    assert _one(nodes, node="node2", verdict="ACCEPTED") == 0
    gemm = {"metric": "compute.matmul_bf16", "where": "node2:gpu0"}
    assert _one(parsed["gpucluster_measurement"], **gemm) == pytest.approx(345.64, abs=0.01)
    (sample,) = [
        s
        for s in parsed["gpucluster_measurement"]
        if s.labels["where"] == "node2:gpu0" and s.labels["metric"] == "compute.matmul_bf16"
    ]
    assert sample.labels["node"] == "node2" and sample.labels["gpu"] == "0" and sample.labels["unit"] == "TFLOP/s"
    assert _one(parsed["gpucluster_measurement_line"], bound="fail_below", **gemm) == 650
    assert _one(parsed["gpucluster_measurement_line"], bound="warn_below", **gemm) == 700
    check = "tests/acceptance/test_compute.py::test_gpu_compute_and_memory[node2]"
    assert _one(parsed["gpucluster_check_verdict"], nodeid=check, verdict="fail") == 1
    finished = datetime(2026, 11, 28, 20, 25, 15, tzinfo=UTC).timestamp()
    assert _one(parsed["gpucluster_run_finished_timestamp_seconds"]) == finished
    counts = doc["acceptance"]["counts"]
    assert _one(parsed["gpucluster_run_checks"], outcome="fail") == counts["fail"]


def test_every_family_is_said_once_with_its_samples_together_and_no_series_twice():
    for path in sorted(SAMPLES.glob("results-*.json")):
        text = metrics.exposition(codec.with_verdicts(codec.load(path)))
        lines = text.splitlines()
        names = [line.split()[2] for line in lines if line.startswith("# TYPE ")]
        assert len(names) == len(set(names)), path.name
        series = [line.rsplit(" ", 1)[0] for line in lines if not line.startswith("#")]
        assert len(series) == len(set(series)), path.name
        # Samples follow their own family's HELP and TYPE; none carries a timestamp.
        family = ""
        for line in lines:
            if line.startswith("# TYPE "):
                family = line.split()[2]
            elif not line.startswith("#"):
                assert line.startswith(family) and len(line.rsplit("} ", 1)[-1].split()) == 1, (path.name, line)
        assert sum(len(s) for s in _parsed(text).values()) == len(series), path.name


def test_label_values_are_escaped_and_read_back_as_written():
    doc = copy.deepcopy(codec.load(GEMM_NODE2))
    odd = 'tests/acceptance/test_x.py::test_y[a"b\\c\nd]'
    doc["tests"][0]["nodeid"] = odd
    parsed = _parsed(metrics.exposition(doc))
    assert odd in {s.labels["nodeid"] for s in parsed["gpucluster_check_verdict"]}


def test_a_run_killed_before_its_verdicts_gets_them_decided(tmp_path):
    doc = json.loads(GEMM_NODE2.read_text())
    del doc["acceptance"]
    parsed = _parsed(metrics.exposition(codec.with_verdicts(doc)))
    assert _one(parsed["gpucluster_node_verdict"], node="node2", verdict="REJECTED") == 1


def test_the_file_is_replaced_whole(tmp_path):
    target = tmp_path / "textfile" / "gpucluster.prom"
    target.parent.mkdir()
    target.write_text("old\n")
    metrics.write(target, codec.load(GEMM_NODE2))
    assert target.read_text() == metrics.exposition(codec.load(GEMM_NODE2))
    assert [p.name for p in target.parent.iterdir()] == ["gpucluster.prom"]  # nothing left beside it
    assert oct(target.stat().st_mode & 0o777) == "0o644"


def test_a_figure_measured_twice_alike_is_two_series_numbered():
    doc = copy.deepcopy(codec.load(GEMM_NODE2))
    test = next(t for t in doc["tests"] if t["measurements"])
    twice = copy.deepcopy(test["measurements"][0])
    twice["value"] = 1.5
    test["measurements"].append(twice)
    first = test["measurements"][0]
    parsed = _parsed(metrics.exposition(doc))
    alike = [
        s
        for s in parsed["gpucluster_measurement"]
        if s.labels["metric"] == first["metric"]
        and s.labels["where"] == first["where"]
        and s.labels.get("detail") == first["detail"]
    ]
    assert sorted((s.labels.get("n", ""), s.value) for s in alike) == [("", first["value"]), ("2", 1.5)]

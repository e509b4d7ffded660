"""Bounds carry their evidence: the loader reads and checks ``source``, every shipped bound has
one, and the report shows beside each judged number what its bound rests on."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_gpucluster.config import Threshold, load
from pytest_gpucluster.errors import ConfigError
from pytest_gpucluster.report import html, model
from pytest_gpucluster.results import codec
from pytest_gpucluster.verdict import Measurement, judge

REPO = Path(__file__).resolve().parents[2]
PROFILE = '[profiles.x]\nexecutor = "local"\n'


def _load(tmp_path, text):
    path = tmp_path / "t.toml"
    path.write_text(PROFILE + text)
    return load(path)


def test_every_shipped_bound_names_its_source():
    config = load(REPO / "thresholds.toml")
    missing = [f"{s}: {m}" for s, ts in config.threshold_sets.items() for m, t in ts.items() if not t.evidence]
    assert missing == []
    assert {t.origin for ts in config.threshold_sets.values() for t in ts.values()} == {"reference", "path"}
    # a line that proves a path only says so in its evidence too
    assert all(
        "path only" in t.evidence for ts in config.threshold_sets.values() for t in ts.values() if t.origin == "path"
    )


def test_source_key_is_read_and_told_apart(tmp_path):
    config = _load(
        tmp_path,
        "[thresholds.default]\n"
        '"gpu.temperature" = { unit = "C", fail_above = 85, source = "NVIDIA datasheet" }\n'
        '"compute.matmul_bf16" = { unit = "TFLOP/s", fail_below = 500, source = "calibrated from 3 run(s) ..." }\n'
        '"compute.memcopy" = { unit = "TB/s", fail_below = 2 }\n',
    )
    t = config.threshold_sets["default"]
    assert (t["gpu.temperature"].origin, t["gpu.temperature"].evidence) == ("reference", "NVIDIA datasheet")
    assert t["compute.matmul_bf16"].origin == "calibration"
    assert t["compute.memcopy"].origin == "site" and t["compute.memcopy"].source.endswith(
        "[thresholds.default.compute.memcopy]"
    )


@pytest.mark.parametrize("value", ["42", '""', "[1]"])
def test_a_bad_source_names_the_key(tmp_path, value):
    text = f'[thresholds.default]\n"gpu.temperature" = {{ unit = "C", fail_above = 85, source = {value} }}\n'
    with pytest.raises(ConfigError, match=r"thresholds\.default\.gpu\.temperature\.source: expected where the bound"):
        _load(tmp_path, text)


def test_site_metric_calibrate_flag_is_checked(tmp_path):
    text = '[metrics."site.x.speed"]\nunit = "GB/s"\nbetter = "higher"\ncalibrate = "yes"\n'
    with pytest.raises(ConfigError, match=r'metrics\."site\.x\.speed"\.calibrate: expected true'):
        _load(tmp_path, text)
    ok = _load(tmp_path, text.replace('"yes"', "true"))
    assert ok.metrics["site.x.speed"].calibrate


def test_report_shows_the_source_beside_the_number():
    calibrated = Threshold(
        "compute.matmul_bf16",
        "TFLOP/s",
        fail_below=500,
        source="t.toml [thresholds.c.compute.matmul_bf16]",
        evidence="calibrated from 3 run(s) started 2026-11-23",
    )
    site = Threshold("gpu.temperature", "C", fail_above=85, source="t.toml [thresholds.default.gpu.temperature]")
    ms = [
        codec.encode_verdict(judge(Measurement("compute.matmul_bf16", 700.0, "TFLOP/s", "n1:gpu0"), calibrated)),
        codec.encode_verdict(judge(Measurement("gpu.temperature", 40.0, "C", "n1:gpu0"), site)),
    ]
    assert ms[0]["threshold"]["origin"] == "calibration" and ms[1]["threshold"]["origin"] == "site"
    assert model.threshold_source(ms[0]) == (
        "calibration: calibrated from 3 run(s) started 2026-11-23 (t.toml [thresholds.c.compute.matmul_bf16])"
    )
    test = {"nodeid": "t::x", "verdict": "pass", "measurements": ms}
    assert model.test_cells({**test, "measurements": ms[:1]}, "").threshold == "fail < 500 TFLOP/s [calibration]"
    details = html.details_of_test(test)
    assert "source of the bound" in details
    assert "calibration: calibrated from 3 run(s)" in details and "site&#39;s choice: t.toml" in details
    # a results file written before bounds carried their evidence: told from the location
    old = {"metric": "nccl.all_reduce.inter_node", "threshold": {"fail_below": 1, "source": "derived: 8 × 400 Gb/s"}}
    assert model.threshold_source(old) == "derived from the fabric: derived: 8 × 400 Gb/s"

"""--gpucluster-calibrate's fragment: lines from the spread of several runs with a floor, speeds only, each
bound with its source; valid TOML that config.load reads back."""

from __future__ import annotations

import json
import statistics
import tomllib

import pytest

from pytest_gpucluster.config import METRICS, load
from pytest_gpucluster.errors import ConfigError
from pytest_gpucluster.results.calibrate import (
    Margins,
    Run,
    calibrate,
    check_comparable,
    lines_for,
    read_run,
    set_name_for,
)


def _doc(*values, started="2026-11-23T10:00:00+00:00", profile="nebius"):
    ms = [{"metric": m, "value": v, "unit": u, "status": s} for m, v, u, s in values]
    return {
        "status": "complete",
        "profile": profile,
        "started": started,
        "nodes": ["n1", "n2"],
        "cluster": {"gpu_model": "NVIDIA H100 80GB HBM3"},
        "tests": [{"measurements": ms}],
    }


DEFAULT = Margins()


def _fragment(*runs, margins=DEFAULT):
    text = calibrate(
        runs, set_name="calibrated-nebius", match="NVIDIA H100 80GB HBM3", extends="nebius", margins=margins
    )
    return text, tomllib.loads(text)["thresholds"]["calibrated-nebius"]


def test_lines_sit_below_the_spread_and_never_closer_than_the_floor():
    runs = [
        Run("a.json", _doc(("compute.matmul_bf16", v, "TFLOP/s", "pass")), sha256="ab" * 32)
        for v in (700.0, 760.0, 780.0)
    ]
    text, table = _fragment(*runs)
    assert table["match"] == ["NVIDIA H100 80GB HBM3"] and table["extends"] == "nebius"
    values = [700.0, 760.0, 780.0]
    spread = statistics.stdev(values)  # 41.6: min − 4 × spread = 533.6 is under 0.75 × 760 = 570
    line = table["compute.matmul_bf16"]
    assert line["fail_below"] == pytest.approx(700 - 4 * spread, abs=0.1)
    assert line["warn_below"] == pytest.approx(700 - 2 * spread, abs=0.1)  # 616.7, under 0.85 × 760 = 646
    assert line["source"].startswith("calibrated from 3 run(s) started 2026-11-23T10:00:00+00:00")
    assert "results sha256 abababababab" in line["source"] and "2 node(s)" in line["source"]
    assert "median 760, spread 41.6 TFLOP/s" in line["source"]
    assert f"sha256 {'ab' * 32}" in text  # the header names each file whole


def test_runs_that_agree_get_the_floor():
    runs = [Run(f"{i}.json", _doc(("compute.matmul_bf16", 750.0, "TFLOP/s", "pass"))) for i in range(3)]
    _, table = _fragment(*runs)
    assert table["compute.matmul_bf16"]["fail_below"] == pytest.approx(562.5)  # 0.75 × 750: spread 0
    assert table["compute.matmul_bf16"]["warn_below"] == pytest.approx(637.5)


def test_sanity_bounds_are_never_calibrated():
    doc = _doc(
        ("sharedfs.free", 62.0, "GiB", "pass"),
        ("sharedfs.capacity", 250.0, "GiB", "pass"),
        ("robustness.rank_failure_teardown", 0.05, "s", "pass"),
        ("inventory.memory_spread", 0.0, "%", "pass"),
        ("gpu.ecc_volatile_uncorrectable", 0, "count", "pass"),
        ("compute.fraction_of_node_median", 0.99, "ratio", "pass"),
        ("baseline.regression", 3.0, "%", "pass"),
        ("nccl.all_reduce.intra_node", 360.0, "GB/s", "pass"),
        ("compute.memcopy", 3.0, "GB/s", "fail"),  # wrong unit: never used
    )
    text, table = _fragment(Run("a.json", doc))
    assert [k for k in table if k not in ("match", "extends")] == ["nccl.all_reduce.intra_node"]
    assert "WARNING" not in text and "NOTE: 1 run(s) show little of the spread" in text


def test_lower_is_better_mirrors():
    spec = METRICS["gpu.temperature"]
    got = lines_for(spec, [40.0, 42.0, 44.0], Margins())
    assert got.fail == pytest.approx(max(44 + 4 * 2.0, 1.25 * 42))
    assert got.warn == pytest.approx(max(44 + 2 * 2.0, 1.15 * 42))


def test_fragment_loads_back_with_its_sources(tmp_path):
    runs = [
        Run(f"{i}.json", _doc(("train.ddp.tokens_per_s_per_gpu", v, "tokens/s", "pass")))
        for i, v in enumerate([8e4, 8.1e4])
    ]
    text, _ = _fragment(*runs)
    base = tmp_path / "base.toml"
    base.write_text('[profiles.nebius]\nexecutor = "local"\n[thresholds.nebius]\n' + text)
    t = load(base).threshold_sets["calibrated-nebius"]["train.ddp.tokens_per_s_per_gpu"]
    assert t.origin == "calibration" and t.evidence.startswith("calibrated from 2 run(s)")


def test_margins_are_checked_and_chosen_by_hardware():
    with pytest.raises(ConfigError, match="need 0 < fail ≤ warn ≤ 1"):
        Margins(fail=0.95, warn=0.9)
    assert (Margins.for_run(None, None, "cpu").fail, Margins.for_run(None, None, "NVIDIA H200").fail) == (0.25, 0.75)
    assert Margins.for_run(0.8, 0.9, "cpu").warn == 0.9
    assert set_name_for("my cluster/a") == "calibrated-my-cluster-a"


def test_bad_inputs_name_the_option_and_the_file(tmp_path):
    with pytest.raises(ConfigError, match=r"--gpucluster-calibrate-from=\S*missing.json: cannot be read"):
        read_run(tmp_path / "missing.json", "--gpucluster-calibrate-from")
    (tmp_path / "x.json").write_text(json.dumps({"schema_version": 1, "tests": []}))
    assert len(read_run(tmp_path / "x.json", "--gpucluster-calibrate-from").sha256) == 64
    (tmp_path / "y.json").write_text("{")
    with pytest.raises(ConfigError, match=r"--gpucluster-calibrate-from=\S*y.json: \S*y.json: not a JSON results file"):
        read_run(tmp_path / "y.json", "--gpucluster-calibrate-from")
    other = Run("o.json", _doc(profile="other"))
    with pytest.raises(
        ConfigError, match=r"--gpucluster-calibrate-from=o\.json: a run of profile 'other'; this run is 'nebius'"
    ):
        check_comparable([other], "nebius", None, "--gpucluster-calibrate-from")
    with pytest.raises(ConfigError, match=r"--gpucluster-calibrate-from=a\.json: measured on 'NVIDIA H100 80GB HBM3'"):
        check_comparable([Run("a.json", _doc())], "nebius", "NVIDIA H200", "--gpucluster-calibrate-from")

"""The soak through submitit's local executor, CPU ranks standing in: with a soak asked for it
runs after the one-shot checks, records every cycle of both ranks and judges them by the shipped
rules for CPU ranks ([soak.cpu_rules]); without one it is not applicable (never a pass); a bad
duration, or a thresholds.toml without the soak's rules, is a usage error before any job."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SUITE = ("test_soak.py", "test_placement.py")


@pytest.fixture
def suite(gpc: pytest.Pytester) -> pytest.Pytester:
    for name in SUITE:
        shutil.copy(REPO / "tests" / "acceptance" / name, gpc.path / name)
    # The shipped rules as they are: two CPU ranks beside the other test workers are judged by
    # [soak.cpu_rules], not by the GPUs' lines.
    with (gpc.path / "thresholds.toml").open("a") as f:
        f.write("\n[profiles.local.soak]\ncycle_s = 2\nsdc_every = 2\n")
    return gpc


def test_a_short_soak_runs_after_the_one_shot_checks_and_keeps_every_cycle(suite):
    result = suite.runpytest_subprocess("--gpucluster-soak=9s", "--gpucluster-results=r.json", "-v")
    doc = json.loads((suite.path / "r.json").read_text())
    assert result.ret == 0, result.stdout.str()[-3000:]
    soak = doc["soak"]
    (node,) = soak["nodes"].values()
    # How many 2-second cycles fit in 9 s depends on what else the two cores run; every one is kept.
    assert node["ended"] == "duration" and node["cycles"] >= 1, node
    assert set(node["gpus"]) == {"cpu0", "cpu1"} and all(
        len(g["tflops"]) == node["cycles"] for g in node["gpus"].values()
    )
    order = [t["area"] for t in doc["tests"]]
    assert order[-1] == "soak" and "placement" in order, order
    said = "[gpucluster] soak of 9 s on 1 node(s), cycles of 2 s; CPU ranks stand in, judged by [soak.cpu_rules]"
    assert said in result.stdout.str()
    assert next(t for t in doc["tests"] if t["area"] == "soak")["verdict"] == "pass"
    # The results name the tables the CPU ranks were judged by.
    rules = soak["rules"]
    assert rules["behind_node_best"]["tables"] == ["soak.cpu_rules.behind_node_best", "soak.rules.behind_node_best"]
    assert rules["behind_node_best"]["tolerance"] == 0.5
    assert rules["hw_slowdown"]["tables"] == ["soak.rules.hw_slowdown"]


def test_without_a_soak_asked_for_it_is_not_applicable(suite):
    result = suite.runpytest_subprocess("test_soak.py", "--gpucluster-results=r.json")
    doc = json.loads((suite.path / "r.json").read_text())
    (soak,) = doc["tests"]
    assert result.ret == 0 and soak["verdict"] == "n/a" and "soak" not in doc
    assert doc["selection"]["not_applicable"][soak["nodeid"]].startswith("no soak was asked for (--gpucluster-soak")


def test_a_bad_duration_is_a_usage_error(suite):
    result = suite.runpytest_subprocess("--gpucluster-soak=eight-hours")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "--gpucluster-soak=eight-hours: 'eight-hours' is not a duration; write e.g. 30m, 8h" in result.stderr.str()


def test_a_thresholds_file_without_the_soaks_rules_is_a_usage_error_naming_them(suite):
    # A site's file written before the soak existed: a profile and its bounds, no [soak.rules].
    (suite.path / "thresholds.toml").write_text('[profiles.local]\nexecutor = "local"\n[thresholds.default]\n')
    result = suite.runpytest_subprocess("--gpucluster-soak=1m")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    err = result.stderr.str()
    said = "a soak of 1 min was asked for (--gpucluster-soak=1m), but the file has no [soak.rules.behind_node_best]"
    assert said in err and "Copy the [soak.rules.*] tables from" in err, err
    assert suite.runpytest_subprocess("test_placement.py").ret == 0  # without a soak, the file serves as it did

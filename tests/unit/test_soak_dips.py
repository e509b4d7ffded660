"""A soak records the dips it recovered from (checks/soak.py, ``[soak.rules.dip]``): on the real
8-minute H200 soak with the dips seen on a real node injected (soak_dip_docs.py), each dip is one
warning naming the GPU (or the node, for its all_reduce), the metric, the cycle, the depth and the
cycle it was back in; the soak passes with warnings, never fails; a fall as long as the drift rule
needs is the drift rule's, not a dip; the report draws every metric with the dips marked."""

from __future__ import annotations

import base64

import pytest
from soak_dip_docs import REPO, dip_doc, judged_dips, sample, streams_of
from test_soak_rules import RULES, judged, stream

from pytest_gpucluster.checks import soak as checks
from pytest_gpucluster.config.load import load
from pytest_gpucluster.config.soak import Dip
from pytest_gpucluster.report import html, plots, soak
from pytest_gpucluster.results import codec
from pytest_gpucluster.run.areas.soak import lines_of

DIP = Dip(warn=0.2, metrics=("tflops",))
STEADY = [700.0] * 12


def test_the_recorded_soak_without_a_dip_has_no_finding():
    track = checks.SoakTrack()
    for records in streams_of(sample()["soak"]):
        track.add(records)
    config = load(REPO / "thresholds.toml")
    profile = config.profile("testbox")
    lines = lines_of(profile, config.thresholds_for(profile, "NVIDIA H200"))
    assert checks.judge(track, profile.soak_rules, lines) == []


def test_each_recovered_dip_is_one_warning_naming_gpu_metric_cycle_depth_and_recovery():
    _, found = judged_dips()
    assert [(f.severity, f.place, f.metric, f.cycle) for f in found] == [
        ("warn", "node1:gpu1", "soak.tflops.dip", 5),
        ("warn", "node1:gpu1", "soak.copy_tbps.dip", 4),
        ("warn", "node1", "soak.busbw_gbps.dip", 7),
    ]
    gemm, copy, busbw = (f.text for f in found)
    assert gemm == (
        "node1:gpu1 GEMM 287 TFLOP/s in cycle 5 (0 h 2 min), −57 % from its level 664, back to 666.2 in cycle 6"
    )
    assert copy == (
        "node1:gpu1 device copy 1.91 TB/s in cycle 4 (0 h 2 min), −55 % from its level 4.217, back to 4.226 in cycle 5"
    )
    assert busbw == (
        "node1 all_reduce busbw 162 GB/s in cycle 7 (0 h 3 min), −54 % from its level 354, back to 353.6 in cycle 8"
    )
    assert found[0].value == pytest.approx(287 / 664.0, abs=1e-3) and found[0].unit == "ratio"
    assert not any(f.convicts for f in found)


def test_a_soak_with_recovered_dips_passes_with_its_warnings_in_full():
    doc = dip_doc()
    recorded = codec.decode_recorded(doc)
    assert recorded.acceptance.verdict == "PARTIAL"  # the sample names one test file; never rejected
    assert [t["verdict"] for t in doc["tests"]] == ["warn"]
    assert [(v.node, v.verdict) for v in recorded.nodes.verdicts] == [("node1", "PARTIAL")]
    assert recorded.acceptance.headline == "PARTIAL: 1 selected check passed, 3 warnings"
    assert recorded.acceptance.warnings[0].startswith("node1:gpu1 GEMM 287 TFLOP/s in cycle 5")
    sentences = [f["text"] for f in doc["soak"]["findings"]]
    assert len(sentences) == 3 and all(f["severity"] == "warn" for f in doc["soak"]["findings"])


def test_two_dips_say_the_deepest_and_the_other_cycle():
    dips = [*STEADY[:4], 500.0, *STEADY[5:8], 300.0, 300.0, *STEADY[10:]]
    rules = RULES.__class__(**{**RULES.__dict__, "dip": DIP})
    (found,) = judged(stream("n1", "gpu0", dips), rules=rules)
    assert found.cycle == 8 and found.severity == "warn"
    assert found.text == (
        "n1:gpu0 GEMM 300 TFLOP/s in cycle 8 (0 h 8 min), −57 % from its level 700, back to 700 in cycle 10; "
        "1 more dip(s) past 20 % in cycle(s) 4"
    )


def test_a_recovery_short_of_the_level_says_how_far_short():
    # The GEMM figures of node1:gpu0 in a real 5-minute H200 soak with 35 s of GEMMs from outside
    # the run (docs/gpu-runs.md): cycle 3 at 329.2, cycle 4 at 570.7, then its level again.
    dip = [650.8, 651.0, 650.5, 329.2, 570.7, 650.8, 650.9, 650.6, 650.7, 650.8]
    rules = RULES.__class__(**{**RULES.__dict__, "dip": DIP})
    (found,) = judged(stream("node1", "gpu0", dip), rules=rules)
    assert found.cycle == 3 and found.severity == "warn" and not found.convicts
    assert found.text.endswith("−49 % from its level 650.7, back to 570.7 (−12 %) in cycle 4")


def test_a_fall_as_long_as_the_drift_rule_needs_fails_and_is_no_dip():
    fall = [*STEADY[:5], *[300.0] * 7]
    rules = RULES.__class__(**{**RULES.__dict__, "dip": DIP})
    (found,) = judged(stream("n1", "gpu0", fall), rules=rules)
    assert (found.severity, found.metric) == ("fail", "soak.tflops.drift")


def test_a_dip_the_soak_ended_in_says_so_and_cycle_0_is_warm_up():
    ends_down = [300.0, *STEADY[1:10], 300.0]
    rules = RULES.__class__(**{**RULES.__dict__, "dip": DIP})
    (found,) = judged(stream("n1", "gpu0", ends_down), rules=rules)
    assert found.cycle == 10 and found.text.endswith(", still down when the soak ended")


def test_a_shallow_dip_and_a_file_without_the_rule_name_nothing():
    shallow = [*STEADY[:5], 600.0, *STEADY[6:]]
    rules = RULES.__class__(**{**RULES.__dict__, "dip": DIP})
    assert judged(stream("n1", "gpu0", shallow), rules=rules) == []
    deep = [*STEADY[:5], 100.0, *STEADY[6:]]
    assert judged(stream("n1", "gpu0", deep)) == []  # RULES has no dip rule: it is optional
    assert "[soak.rules.dip]" not in RULES.missing()


def test_the_report_draws_every_metric_with_the_dips_marked():
    doc = dip_doc()
    fig = soak.node_figure("node1", doc["soak"]["nodes"]["node1"], doc["soak"]["findings"], 30.0)
    titles = [p.title for p in fig.panels]
    assert titles[:3] == ["GEMM, TFLOP/s", "device copy, TB/s", "all_reduce busbw, GB/s"]
    warn = [(m.label, m.panel, m.y) for m in fig.marks if m.severity == "warn"]
    assert warn == [
        ("gpu1 cycle 5", "GEMM, TFLOP/s", 287.0),
        ("gpu1 cycle 4", "device copy, TB/s", 1.91),
        ("node cycle 7", "all_reduce busbw, GB/s", 162.0),
    ]
    assert fig.caption.endswith(
        "warnings (amber, dotted): gpu1 GEMM in cycle 5, gpu1 device copy in cycle 4, node all_reduce busbw in cycle 7"
    )
    svg = base64.b64decode(plots.small_multiples("n", fig.panels, fig.marks, "min").split(",", 1)[1]).decode()
    assert "gpu1 cycle 5" in svg and plots.STATUS_COLOURS["warn"] in svg
    block = html.soak_block(doc)
    assert "node1:gpu1 GEMM 287 TFLOP/s in cycle 5" in block and "back to 666.2 in cycle 6" in block
    assert "gc-s-warn" in block


def test_a_cpu_rank_standing_in_has_no_dip():
    deep = [*STEADY[:5], 100.0, *STEADY[6:]]
    records = stream("n1", "cpu0", deep)
    records[0]["device"] = "cpu"
    rules = RULES.__class__(**{**RULES.__dict__, "dip": DIP})
    assert judged(records, rules=rules) == []

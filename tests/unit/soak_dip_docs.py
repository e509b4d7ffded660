"""A recorded soak with dips it recovered from, for the soak rules' and the report's tests: the real
8-minute soak on one H200 (docs/samples/results-soak-h200-1gpu.json) turned back into the stream
records its GPU wrote, with a second GPU made of the first's readings (shifted by one cycle) and
the node's all_reduce, then the dips seen on a real node injected: gpu1's GEMM 660 → 287 TFLOP/s
in cycle 5, its copy 4.25 → 1.91 TB/s in cycle 4, the node's busbw 354 → 162 GB/s in cycle 7.
Judged by the soak's own rules (``checks.soak.judge``) and folded into the results document as a
run folds them, so the findings and the section have the real shapes."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from pytest_gpucluster.checks import soak as checks
from pytest_gpucluster.config.load import load
from pytest_gpucluster.results import codec
from pytest_gpucluster.run.areas.soak import lines_of
from pytest_gpucluster.verdict import Finding

REPO = Path(__file__).resolve().parents[2]
SAMPLE = REPO / "docs" / "samples" / "results-soak-h200-1gpu.json"
BUSBW = 354.0
DIPS = {("gpu1", "tflops", 5): 287.0, ("gpu1", "copy_tbps", 4): 1.91}
BUSBW_DIP = (7, 162.0)


def sample() -> dict[str, Any]:
    return json.loads(SAMPLE.read_text())


def streams_of(section: dict[str, Any]) -> list[list[dict[str, Any]]]:
    """Every GPU's stream records (start, cycles) a results' ``soak`` section was made from."""
    out = []
    for node, entry in section["nodes"].items():
        start = float(entry["started"])
        for gpu, series in entry["gpus"].items():
            records: list[dict[str, Any]] = [
                {"kind": "start", "node": node, "gpu": gpu, "device": series["device"], "t": start, "ecc_unc": 0}
            ]
            times = series["t"]
            for i, t in enumerate(times):
                cycle: dict[str, Any] = {"kind": "cycle", "node": node, "gpu": gpu, "cycle": i, "t0": start + t}
                cycle["t1"] = start + (times[i + 1] if i + 1 < len(times) else t + 30.0) - 0.1
                cycle.update({key: series[key][i] for key in checks.SERIES})
                cycle.update({"samples": 30, "ecc_unc": 0})
                if entry.get("busbw_gbps"):
                    cycle["busbw_gbps"] = entry["busbw_gbps"][i]
                records.append(cycle)
            out.append(records)
    return out


def dip_streams() -> list[list[dict[str, Any]]]:
    """The sample's streams with gpu1 and the busbw added and the dips injected."""
    doc = sample()
    section = copy.deepcopy(doc["soak"])
    node = section["nodes"]["node1"]
    gpu0 = node["gpus"]["gpu0"]
    node["gpus"]["gpu1"] = {**gpu0, **{key: gpu0[key][1:] + gpu0[key][:1] for key in checks.SERIES}}
    node["busbw_gbps"] = [round(BUSBW + 0.4 * ((7 * i) % 5 - 2), 2) for i in range(len(gpu0["t"]))]
    streams = streams_of(section)
    for records in streams:
        for r in records[1:]:
            for (gpu, metric, cycle), low in DIPS.items():
                if (r["gpu"], r["cycle"]) == (gpu, cycle):
                    r[metric] = low
            if r["cycle"] == BUSBW_DIP[0]:
                r["busbw_gbps"] = BUSBW_DIP[1]
    return streams


def judged_dips() -> tuple[checks.SoakTrack, list[Finding]]:
    """The dipped soak judged by the 4 × H200 test machine's rules (thresholds.toml)."""
    config = load(REPO / "thresholds.toml")
    profile = config.profile("testbox")
    track = checks.SoakTrack()
    for records in dip_streams():
        track.add(records)
    lines = lines_of(profile, config.thresholds_for(profile, "NVIDIA H200"))
    return track, checks.judge(track, profile.soak_rules, lines)


def dip_doc() -> dict[str, Any]:
    """The sample's results document with the dipped soak: its section, the soak check's
    findings and warnings as ``test_soak.py`` records them, and the verdicts decided again."""
    doc = sample()
    track, findings = judged_dips()
    config = load(REPO / "thresholds.toml")
    rules = config.profile("testbox").soak_rules
    section = checks.section(
        track,
        requested_s=doc["soak"]["requested_s"],
        config=doc["soak"]["config"],
        rules=rules,
        nodes={"node1": {"job_id": "2", "ended": "duration"}},
    )
    section["findings"] = [codec.encode_finding(f) for f in findings]
    section["stream_folder"] = doc["soak"]["stream_folder"]
    doc["soak"] = section
    doc["cluster"]["gpus_per_node"] = 2
    (test,) = doc["tests"]
    test["findings"] = [codec.encode_finding(f) for f in findings]
    test["warnings"] = [f.text for f in findings if f.severity == "warn"]
    test["verdict"] = "warn"
    doc.pop("acceptance")
    return codec.with_verdicts(doc)

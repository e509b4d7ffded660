"""Synthetic soak results, for the report's tests and tools/render-samples: every node's cycle
records made from seeded random numbers (no GPU ran them), judged by the soak's own rules
(``checks.soak.judge`` with the ``nebius`` profile's rules and lines from thresholds.toml) and
folded into a results document by ``checks.soak.section``, as a run does; so the findings and the
``soak`` section have the real shapes. One GPU drifts (its node's soak is stopped for it) and one
is braked by its power supply (a warning)."""

from __future__ import annotations

import math
import random
from pathlib import Path
from typing import Any

from pytest_gpucluster.checks import soak as checks
from pytest_gpucluster.config.load import load
from pytest_gpucluster.plan.selection import Selection
from pytest_gpucluster.results import codec
from pytest_gpucluster.results.document import ResultsDocument
from pytest_gpucluster.run.areas.soak import lines_of
from pytest_gpucluster.verdict import Finding
from pytest_gpucluster.workloads.soak import SoakConfig, config_dict

REPO = Path(__file__).resolve().parents[2]
MODEL = "NVIDIA H100 80GB HBM3"
T0 = 1_795_845_600.0  # 2026-11-28 06:00 UTC
SDC_DIGEST = "5f0c3a9e1b7d2468"


def node_names(count: int) -> list[str]:
    return [f"gpu-{i:03d}" for i in range(1, count + 1)]


def _gpu_stream(
    rng: random.Random,
    node: str,
    gpu: int,
    cycles: int,
    cycle_s: float,
    *,
    drift_from: int | None,
    brake_from: int | None,
) -> list[dict[str, Any]]:
    """One GPU's records: a start, then ``cycles`` cycles of noisy steady load; from ``drift_from``
    its GEMM rate and clock sink while it heats (20 % down over a fifth of the soak); from
    ``brake_from``, for 15 % of the soak, the power brake every fifth cycle with its clock dip."""
    label = f"gpu{gpu}"
    start = T0 + rng.uniform(0.0, 2.0)
    base_tflops = rng.gauss(712.0, 5.0)
    base_temp = rng.uniform(55.0, 66.0)
    base_power = rng.gauss(688.0, 6.0)
    records: list[dict[str, Any]] = [
        {"kind": "start", "node": node, "gpu": label, "device": MODEL, "t": start, "ecc_unc": 0, "remap_pending": 0}
    ]
    span = max(1, cycles // 5)
    for c in range(cycles):
        t0 = start + c * cycle_s + rng.uniform(0.0, 0.3)
        sink = min(1.0, (c - drift_from) / span) * 0.2 if drift_from is not None and c >= drift_from else 0.0
        braked = brake_from is not None and brake_from <= c < brake_from + max(5, cycles * 15 // 100) and c % 5 == 0
        warm = 1.0 - math.exp(-c * cycle_s / 420.0)
        clock = rng.gauss(1965.0, 6.0) * (1.0 - 0.6 * sink) - (240.0 if braked else 0.0)
        record: dict[str, Any] = {
            "kind": "cycle",
            "node": node,
            "gpu": label,
            "cycle": c,
            "t0": round(t0, 3),
            "t1": round(t0 + cycle_s - 0.2, 3),
            "tflops": round(base_tflops * (1.0 - sink) * rng.gauss(1.0, 0.003), 4),
            "copy_tbps": round(rng.gauss(2.91, 0.01), 5),
            "samples": int(cycle_s),
            "sm_mhz": round(clock),
            "sm_mhz_min": round(clock - rng.uniform(0.0, 30.0)),
            "temp_c": round(38.0 + (base_temp - 38.0) * warm + 9.0 * sink + rng.gauss(0.0, 0.6)),
            "mem_temp_c": round(40.0 + (base_temp - 34.0) * warm + rng.gauss(0.0, 0.6)),
            "power_w": round(base_power * (0.94 if braked else 1.0) + rng.gauss(0.0, 4.0), 1),
            "power_w_max": round(base_power + rng.uniform(5.0, 25.0), 1),
            "ecc_unc": 0,
            "remap_pending": 0,
        }
        if braked:
            # one or two readings of a second: 2 to 4 in any window of ten cycles, between the lines
            record["throttle"] = {"hw_power_brake_slowdown": [1, float(rng.choice((1, 2)))]}
        if c % 5 == 0:
            record["sdc"] = SDC_DIGEST
        records.append(record)
    return records


def synthetic_soak_doc(
    nodes: int = 64, gpus: int = 8, hours: float = 8.0, cycle_s: float = 60.0, seed: int = 20261128
) -> dict[str, Any]:
    """A results document of a soak of ``hours`` on ``nodes`` × ``gpus`` H100 in cycles of
    ``cycle_s``, made from seeded random numbers: the GPU ``gpus - 3`` of the node three eighths
    down the list drifts from 45 % of the soak, and its node's soak is stopped as a run stops it
    (the cycle after the failure was seen); the GPU 2 of the node five eighths down is braked
    by its power supply from 60 % of the soak (a warning). Every other cycle is steady noise."""
    rng = random.Random(seed)
    config = load(REPO / "thresholds.toml")
    profile = config.profile("nebius")
    rules = profile.soak_rules
    lines = lines_of(profile, config.thresholds_for(profile, MODEL))
    names = node_names(nodes)
    cycles = int(hours * 3600 // cycle_s)
    drifting = (names[nodes * 3 // 8], max(0, gpus - 3))
    braked = (names[nodes * 5 // 8], min(2, gpus - 1))
    ended: dict[str, dict[str, Any]] = {}
    track = checks.SoakTrack()
    for i, node in enumerate(names):
        streams = [
            _gpu_stream(
                rng,
                node,
                g,
                cycles,
                cycle_s,
                drift_from=cycles * 45 // 100 if (node, g) == drifting else None,
                brake_from=cycles * 60 // 100 if (node, g) == braked else None,
            )
            for g in range(gpus)
        ]
        busbw = [round(rng.gauss(361.0, 1.2), 3) for _ in range(cycles)]
        for stream in streams:
            for record, value in zip(stream[1:], busbw, strict=True):
                record["busbw_gbps"] = value
        state = {"job_id": str(4711 + i), "ended": "duration"}
        if node == drifting[0]:
            alone = checks.SoakTrack()
            for stream in streams:
                alone.add(stream)
            first = min(f.cycle or 0 for f in checks.judge(alone, rules, lines) if f.severity == "fail")
            # Seen once its cycles in a row arrived; the node stops before the cycle after the next.
            keep = min(cycles, first + (rules.drift.cycles if rules.drift else 3) + 1)
            streams = [s[: keep + 1] for s in streams]
            state["ended"] = "stopped"
        for stream in streams:
            track.add(stream)
        ended[node] = state
    findings = checks.judge(track, rules, lines)
    section = checks.section(
        track,
        requested_s=hours * 3600.0,
        config=config_dict(SoakConfig(cycle_s=cycle_s)),
        rules=rules,
        nodes=ended,
    )
    section["findings"] = [codec.encode_finding(f) for f in findings]
    section["stream_folder"] = "/mnt/sharedfs/.pytest-gpucluster/ops/jobs/synthetic/soak-5a0c1e"
    return _document(names, gpus, hours, findings, section)


def _document(
    names: list[str], gpus: int, hours: float, findings: list[Finding], section: dict[str, Any]
) -> dict[str, Any]:
    """The soak's results document: one soak check per node, judged on its findings as
    ``test_soak.py`` judges them."""
    doc = ResultsDocument(profile="synthetic-soak", thresholds_file="thresholds.toml", thresholds_sha256="0" * 64)
    doc.started, doc.finished, doc.status = "2026-11-28T06:00:00+00:00", "2026-11-28T14:06:12+00:00", "complete"
    doc.wall_s = hours * 3600.0 + 372.0
    doc.nodes = list(names)
    doc.cluster = {
        "profile": doc.profile,
        "description": f"synthetic: {len(names)} nodes × {gpus} GPUs soaked {hours:g} h, no real measurement",
        "executor": "slurm",
        "gpu_model": MODEL,
        "gpus_per_node": gpus,
        "nodes_expected": len(names),
    }
    doc.environment = {"plugin": "0.1.0", "python": "3.12.3", "torch": "2.11.0", "thresholds_set": "nebius"}
    summary = {"gpu_model": MODEL, "gpu_count": gpus, "driver": "575.57.08", "cuda": "12.9"}
    doc.inventory = {n: {"summary": summary, "hostname": n} for n in names}
    for node in names:
        rec = doc.record(f"tests/acceptance/test_soak.py::test_soak[{node}]")
        mine = [f for f in findings if node in f.nodes]
        failing = [f.text for f in mine if f.severity == "fail"]
        rec.node, rec.outcome, rec.duration_s = node, "failed" if failing else "passed", hours * 3600.0
        rec.findings = mine
        rec.message = f"Failed: {'; '.join(failing)}" if failing else ""
    doc.soak = section
    doc.selection = Selection(required=list(doc.tests))
    return codec.with_verdicts(doc.to_json())

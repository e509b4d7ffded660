"""This run against an earlier results file (``--gpucluster-baseline``): one change per measurement, judged
as a ``baseline.regression`` (the drop in %, direction-aware) against thresholds.toml.

Pure: two results documents and a threshold in, verdicts out. A measurement is identified by
(metric, where, detail); when a run measured the same key twice the worse value stands for it.
A key measured on only one side is listed, not judged; so is a baseline value of 0 (no
percentage exists) and a value that is not a finite number.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pytest_gpucluster.config import METRICS, Threshold
from pytest_gpucluster.verdict import Measurement, Verdict, judge

Key = tuple[str, str, str]
REGRESSION_METRIC = "baseline.regression"

# Facts that make two runs incomparable when they differ (pytest-benchmark warns likewise).
ENVIRONMENT_FACTS = (
    ("GPU model", ("cluster", "gpu_model")),
    ("GPUs per node", ("cluster", "gpus_per_node")),
    ("node count", ("cluster", "node_count")),
    ("NVIDIA driver", ("environment", "driver")),
    ("CUDA", ("environment", "cuda")),
    ("NCCL", ("environment", "nccl")),
    ("PyTorch", ("environment", "torch")),
    ("pytest-gpucluster", ("environment", "plugin")),
    ("thresholds set", ("environment", "thresholds_set")),
)


def key_of(m: Mapping[str, Any]) -> Key:
    """The identity of a measurement across runs."""
    return str(m.get("metric", "")), str(m.get("where", "")), str(m.get("detail", ""))


def _better(metric: str) -> str:
    spec = METRICS.get(metric)
    return spec.better if spec else "higher"


def measurements_by_key(doc: Mapping[str, Any]) -> dict[Key, Mapping[str, Any]]:
    """Every judged measurement of a results document, the worse one where a key repeats."""
    out: dict[Key, Mapping[str, Any]] = {}
    for t in doc.get("tests", []):
        for m in t.get("measurements", []):
            if m.get("metric") == REGRESSION_METRIC or not isinstance(m.get("value"), int | float):
                continue
            k = key_of(m)
            if k in out:
                old, new = float(out[k]["value"]), float(m["value"])
                worse = new < old if _better(k[0]) == "higher" else new > old
                if not worse:
                    continue
            out[k] = m
    return out


def regression_pct(metric: str, before: float, after: float) -> float | None:
    """How much worse ``after`` is than ``before`` in % of ``before`` (negative: better);
    None when no percentage exists (baseline 0, a NaN or an infinity)."""
    if not (math.isfinite(before) and math.isfinite(after)) or before == 0:
        return None
    change = (before - after) / abs(before) * 100.0
    return change if _better(metric) == "higher" else -change


@dataclass(frozen=True)
class Change:
    """One measurement in both runs, and the verdict on its regression."""

    key: Key
    before: float
    after: float
    verdict: Verdict


@dataclass(frozen=True)
class Comparison:
    """The comparison of this run with a baseline."""

    baseline_path: str
    changes: tuple[Change, ...]
    only_in_baseline: tuple[Key, ...]
    only_in_run: tuple[Key, ...]
    not_comparable: tuple[Key, ...]
    environment_differences: tuple[str, ...]

    @property
    def verdicts(self) -> list[Verdict]:
        """The regression verdicts, worst regression first."""
        return [c.verdict for c in self.changes]

    @property
    def failed(self) -> list[Change]:
        """Regressions past the fail line."""
        return [c for c in self.changes if c.verdict.status == "fail"]

    @property
    def warned(self) -> list[Change]:
        """Regressions past the warn line only."""
        return [c for c in self.changes if c.verdict.status == "warn"]


def _label(k: Key) -> str:
    metric, _, detail = k
    return f"{metric} {detail}".strip()


def _fact(doc: Mapping[str, Any], path: tuple[str, str]) -> Any:
    section, name = path
    if section == "cluster" and name == "node_count":
        return len(doc.get("nodes", [])) or None
    return doc.get(section, {}).get(name)


def environment_differences(run: Mapping[str, Any], baseline: Mapping[str, Any]) -> list[str]:
    """``GPU model: NVIDIA H100 80GB HBM3 (baseline) → NVIDIA H200 (this run)`` for each fact
    recorded on both sides that differs."""
    out = []
    for label, path in ENVIRONMENT_FACTS:
        a, b = _fact(baseline, path), _fact(run, path)
        if a is not None and b is not None and str(a) != str(b):
            out.append(f"{label}: {a} (baseline) → {b} (this run)")
    return out


def compare(
    run: Mapping[str, Any], baseline: Mapping[str, Any], threshold: Threshold, *, baseline_path: str = ""
) -> Comparison:
    """Judge every measurement present in both runs as a regression against ``threshold``."""
    now, then = measurements_by_key(run), measurements_by_key(baseline)
    changes: list[Change] = []
    not_comparable: list[Key] = []
    for k in sorted(now.keys() & then.keys()):
        b, a = float(then[k]["value"]), float(now[k]["value"])
        pct = regression_pct(k[0], b, a)
        if pct is None:
            not_comparable.append(k)
            continue
        unit = str(now[k].get("unit", ""))
        detail = f"{_label(k)}: {b:.4g} → {a:.4g} {unit}".strip()
        m = Measurement(REGRESSION_METRIC, round(pct, 3), "%", where=k[1], detail=detail)
        changes.append(Change(k, b, a, judge(m, threshold)))
    return Comparison(
        baseline_path=baseline_path,
        changes=tuple(sorted(changes, key=lambda c: -c.verdict.measurement.value)),
        only_in_baseline=tuple(sorted(then.keys() - now.keys())),
        only_in_run=tuple(sorted(now.keys() - then.keys())),
        not_comparable=tuple(not_comparable),
        environment_differences=tuple(environment_differences(run, baseline)),
    )

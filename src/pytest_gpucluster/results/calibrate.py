"""A thresholds.toml fragment from known-good runs (``--gpucluster-calibrate``, ``--gpucluster-calibrate-from``).

Every measurement of a calibratable metric (``Metric.calibrate``: speeds only) in every run given is
pooled: all runs, nodes and GPUs. For a metric that is better higher the lines are

    fail_below = min(lowest − k_fail × spread, fail × median)
    warn_below = min(lowest − k_warn × spread, warn × median)

with ``spread`` the sample standard deviation of the pooled values; for one better lower they
mirror (``max(highest + k × spread, (2 − fraction) × median)``). The spread term keeps the line
clear of the variation the runs showed; the floor keeps it at least ``1 − fraction`` of the median
away when the runs happened to agree (one run, or three on a quiet day), so the next run's
ordinary variation does not fail. Every other metric keeps the bound of the set in force.

Each bound carries a ``source`` key saying where it came from (runs, results files' sha256, nodes,
median, spread, margin), which ``config.load`` reads and the report shows. Pure: results documents
in, TOML text out.
"""

from __future__ import annotations

import hashlib
import math
import re
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_gpucluster.config import METRICS, Metric
from pytest_gpucluster.config.thresholds import CALIBRATED_PREFIX
from pytest_gpucluster.errors import ConfigError
from pytest_gpucluster.results.codec import load

# The floors when the options leave them unset: on GPUs, the margins of the shipped gates (a fail
# line about 0.75 × a healthy reading, e.g. 600 of 790 TFLOP/s, 60 k of 81 k tokens/s); on CPU
# stand-ins (no GPU devices), a quarter and a half of the median: their throughput depends on what
# else the machine runs, and like the cpu set the lines there only catch a path that stopped working.
GPU_FLOORS = (0.75, 0.85)
CPU_FLOORS = (0.25, 0.5)


@dataclass(frozen=True)
class Margins:
    """How far the calibrated lines sit from the measurements: ``k_fail`` / ``k_warn`` spreads
    beyond the worst value, and never closer to the median than ``fail`` / ``warn`` × it."""

    fail: float = GPU_FLOORS[0]
    warn: float = GPU_FLOORS[1]
    k_fail: float = 4.0
    k_warn: float = 2.0

    def __post_init__(self) -> None:
        if not (0 < self.fail <= self.warn <= 1):
            raise ConfigError(
                f"--gpucluster-calibrate-fail={self.fail:g} and --gpucluster-calibrate-warn={self.warn:g}: need "
                "0 < fail ≤ warn ≤ 1 (e.g. 0.75 and 0.85: a fail line at most 75 % of the median measured)."
            )
        if not (0 <= self.k_warn <= self.k_fail):
            raise ConfigError(f"spread multiples: need 0 ≤ k_warn ≤ k_fail, got {self.k_warn:g} and {self.k_fail:g}.")

    @classmethod
    def for_run(cls, fail: float | None, warn: float | None, gpu_model: str | None) -> Margins:
        """The floors the options give, else those for the hardware (``cpu``: no GPU devices)."""
        floors = CPU_FLOORS if (gpu_model or "cpu").lower() == "cpu" else GPU_FLOORS
        return cls(fail=floors[0] if fail is None else fail, warn=floors[1] if warn is None else warn)


@dataclass(frozen=True)
class Run:
    """One known-good run: its results document and where it came from."""

    label: str  # the file's path, or "this run"
    doc: Mapping[str, Any]
    sha256: str = ""  # of the results file; empty for the run in progress


def read_run(path: Path, option: str) -> Run:
    """A results file for ``--gpucluster-calibrate-from``; errors name the option and the file."""
    try:
        data = path.read_bytes()
        doc = load(path)
    except OSError as exc:
        raise ConfigError(f"{option}={path}: cannot be read ({exc.strerror}).") from None
    except ValueError as exc:
        raise ConfigError(f"{option}={path}: {exc}") from None
    return Run(label=str(path), doc=doc, sha256=hashlib.sha256(data).hexdigest())


def check_comparable(runs: Sequence[Run], profile: str, gpu_model: str | None, option: str) -> None:
    """Every run given must be of ``profile`` on ``gpu_model``: lines from another cluster or
    another GPU would judge this one by the wrong numbers."""
    for run in runs:
        theirs = run.doc.get("profile")
        model = (run.doc.get("cluster") or {}).get("gpu_model")
        if theirs != profile:
            raise ConfigError(
                f"{option}={run.label}: a run of profile {theirs!r}; this run is {profile!r}. "
                "Calibrate from runs of the cluster the lines are for."
            )
        if gpu_model and model and model != gpu_model:
            raise ConfigError(f"{option}={run.label}: measured on {model!r}; this run found {gpu_model!r}.")


def _number(value: float) -> str:
    # 4 significant digits are plenty for a bound and keep the file readable; TOML needs a
    # digit after the point, so 1e-05 is written as 1.0e-05.
    text = f"{value:.4g}"
    if "e" in text and "." not in text.split("e")[0]:
        mantissa, exponent = text.split("e")
        text = f"{mantissa}.0e{exponent}"
    return text


def _quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def set_name_for(profile: str) -> str:
    """``calibrated-<profile>``, reduced to the characters of a bare TOML key."""
    return "calibrated-" + (re.sub(r"[^A-Za-z0-9_-]+", "-", profile).strip("-") or "run")


@dataclass(frozen=True)
class Lines:
    """The calibrated lines of one metric and the numbers they came from."""

    metric: Metric
    values: tuple[float, ...]
    fail: float
    warn: float

    @property
    def median(self) -> float:
        return statistics.median(self.values)

    @property
    def spread(self) -> float:
        return statistics.stdev(self.values) if len(self.values) > 1 else 0.0


def lines_for(metric: Metric, values: Sequence[float], margins: Margins) -> Lines:
    """The fail and warn lines for ``values`` of ``metric`` (see the module docstring)."""
    med = statistics.median(values)
    spread = statistics.stdev(values) if len(values) > 1 else 0.0
    if metric.better == "higher":
        low = min(values)
        fail = min(low - margins.k_fail * spread, margins.fail * med)
        warn = min(low - margins.k_warn * spread, margins.warn * med)
        fail, warn = max(fail, 0.0), max(warn, 0.0)
    else:
        high = max(values)
        fail = max(high + margins.k_fail * spread, (2 - margins.fail) * med)
        warn = max(high + margins.k_warn * spread, (2 - margins.warn) * med)
    return Lines(metric, tuple(values), fail, warn)


def _measured(runs: Sequence[Run], catalogue: Mapping[str, Metric]) -> tuple[dict[str, list[float]], int]:
    values: dict[str, list[float]] = {}
    failed = 0
    for run in runs:
        for t in run.doc.get("tests", []):
            for m in t.get("measurements", []):
                metric, unit, value = str(m.get("metric")), str(m.get("unit")), m.get("value")
                spec = catalogue.get(metric)
                if spec is None or not spec.calibrate or unit != spec.unit:
                    continue
                if not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
                    continue
                failed += m.get("status") == "fail"
                values.setdefault(metric, []).append(float(value))
    return values, failed


def _source(lines: Lines, runs: Sequence[Run], nodes: int, margins: Margins) -> str:
    m = lines.metric
    dates = ", ".join(str(r.doc.get("started", "?")) for r in runs)
    shas = ", ".join(r.sha256[:12] for r in runs if r.sha256) or "-"
    if m.better == "higher":
        how = (
            f"fail = min(lowest {min(lines.values):.4g} − {margins.k_fail:g} × spread, {margins.fail:g} × median), "
            f"warn = min(lowest − {margins.k_warn:g} × spread, {margins.warn:g} × median)"
        )
    else:
        how = (
            f"fail = max(highest {max(lines.values):.4g} + {margins.k_fail:g} × spread, "
            f"{2 - margins.fail:g} × median), warn = max(highest + {margins.k_warn:g} × spread, "
            f"{2 - margins.warn:g} × median)"
        )
    return (
        f"{CALIBRATED_PREFIX} from {len(runs)} run(s) started {dates} (results sha256 {shas}); {nodes} node(s); "
        f"{len(lines.values)} value(s), median {lines.median:.4g}, spread {lines.spread:.3g} {m.unit}; {how}"
    )


def calibrate(
    runs: Sequence[Run],
    *,
    set_name: str,
    match: str | None,
    extends: str | None,
    margins: Margins = Margins(),  # frozen: a shared default is safe
    catalogue: Mapping[str, Metric] = METRICS,
) -> str:
    """The TOML fragment for the measurements of ``runs`` (results documents of one cluster);
    ``catalogue`` adds a site's metrics to the suite's."""
    values, failed = _measured(runs, catalogue)
    nodes = sorted({n for r in runs for n in r.doc.get("nodes", [])})
    lines = [
        f"# Calibrated by pytest-gpucluster from {len(runs)} run(s) of profile "
        f"{runs[0].doc.get('profile', '?') if runs else '?'!r} on {len(nodes)} node(s): {', '.join(nodes) or '-'}."
    ]
    for run in runs:
        sha = f", sha256 {run.sha256}" if run.sha256 else ""
        lines.append(
            f"# - {run.label}: {run.doc.get('status', '?')} run started {run.doc.get('started', '?')}"
            f", verdict {(run.doc.get('acceptance') or {}).get('verdict', '?')}{sha}"
        )
    lines += [
        f"# Lines from all values of all runs: fail at the lowest − {margins.k_fail:g} × spread, never above "
        f"{margins.fail:g} × the median; warn at the lowest − {margins.k_warn:g} × spread, never above "
        f"{margins.warn:g} × the median (mirrored for metrics that are better lower).",
        "# Only speeds are calibrated; counts, capacities, free space, temperatures and teardown times keep "
        "their bounds.",
        f'# Select it in a profile with thresholds = "{set_name}" (a set named there wins over `match`).',
    ]
    if len(runs) < 3:
        lines.append(f"# NOTE: {len(runs)} run(s) show little of the spread; calibrate from 3 or more.")
    if failed:
        lines.append(f"# WARNING: {failed} measurement(s) failed in these runs; review every line before use.")
    if any(r.doc.get("status") not in ("complete", "running") for r in runs):
        lines.append("# WARNING: a run did not complete; metrics it did not reach have fewer values.")
    lines.append(f"[thresholds.{_quote(set_name)}]")
    if match:
        lines.append(f"match = [{_quote(match)}]")
    if extends and extends != set_name:
        lines.append(f"extends = {_quote(extends)}")
    shapes = {(r.doc.get("cluster") or {}).get("gpus_per_node") for r in runs}
    if len(shapes) == 1 and isinstance(shape := shapes.pop(), int) and shape > 0:
        # The intra-node lines hold for this node shape only (config/thresholds.py, shape_specific).
        lines.append(f"gpus_per_node = {shape}")
    for metric in sorted(values):
        got = lines_for(catalogue[metric], values[metric], margins)
        side = "below" if got.metric.better == "higher" else "above"
        bounds = f"fail_{side} = {_number(got.fail)}, warn_{side} = {_number(got.warn)}"
        source = _source(got, runs, len(nodes), margins)
        lines.append(f"{_quote(metric)} = {{ unit = {_quote(got.metric.unit)}, {bounds}, source = {_quote(source)} }}")
    if not values:
        lines.append("# no calibratable measurement in these runs: nothing to calibrate")
    return "\n".join(lines) + "\n"

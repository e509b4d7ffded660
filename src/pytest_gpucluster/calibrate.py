"""A thresholds.toml fragment from a known-good run (``--calibrate``).

For a metric that is better higher, the fail line is ``fail_fraction`` × the lowest value measured
and the warn line ``warn_fraction`` × it; for a metric that is better lower, the lines mirror
around the highest value (``max × (2 − fraction)``). The fragment is one
``[thresholds.<name>]`` set that extends the set in force, matched on the GPU model, so a
metric this run did not measure keeps its current bounds. Pure: a results document in, TOML text
out; ``config.load`` reads the result back.
"""

from __future__ import annotations

import math
import re
import statistics
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pytest_gpucluster.config import METRICS
from pytest_gpucluster.errors import ConfigError

NOT_CALIBRATED = ("baseline.regression",)  # judges a comparison, not the cluster


@dataclass(frozen=True)
class Fractions:
    """Where the calibrated lines sit, as fractions of the worst measured value."""

    fail: float = 0.9
    warn: float = 0.95

    def __post_init__(self) -> None:
        if not (0 < self.fail <= self.warn <= 1):
            raise ConfigError(
                f"--calibrate-fail={self.fail:g} and --calibrate-warn={self.warn:g}: need "
                "0 < fail ≤ warn ≤ 1 (e.g. 0.9 and 0.95: fail below 90 % of the worst value measured)."
            )


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


def calibrate(
    doc: Mapping[str, Any],
    *,
    set_name: str,
    match: str | None,
    extends: str | None,
    fractions: Fractions = Fractions(),  # frozen: a shared default is safe
) -> str:
    """The TOML fragment for the measurements of ``doc`` (a results document)."""
    values: dict[str, list[float]] = {}
    failed = 0
    for t in doc.get("tests", []):
        for m in t.get("measurements", []):
            metric, unit, value = str(m.get("metric")), str(m.get("unit")), m.get("value")
            spec = METRICS.get(metric)
            if spec is None or metric in NOT_CALIBRATED or unit != spec.unit:
                continue
            if not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
                continue
            failed += m.get("status") == "fail"
            values.setdefault(metric, []).append(float(value))
    lines = [
        f"# Calibrated by pytest-gpucluster from the {doc.get('status', '?')} run of profile "
        f"{doc.get('profile', '?')!r} started {doc.get('started', '?')},",
        f"# on {len(doc.get('nodes', []))} node(s): {', '.join(doc.get('nodes', [])) or '-'}.",
        f"# Lines: fail at {fractions.fail:g} × and warn at {fractions.warn:g} × the worst value measured "
        "(mirrored for metrics that are better lower).",
        f'# Select it in a profile with thresholds = "{set_name}" (a set named there wins over `match`).',
    ]
    if failed:
        lines.append(f"# WARNING: {failed} measurement(s) failed in this run; review every line before use.")
    if doc.get("status") != "complete":
        lines.append("# WARNING: the run did not complete; metrics it did not reach keep their current bounds.")
    lines.append(f"[thresholds.{_quote(set_name)}]")
    if match:
        lines.append(f"match = [{_quote(match)}]")
    if extends and extends != set_name:
        lines.append(f"extends = {_quote(extends)}")
    for metric in sorted(values):
        spec = METRICS[metric]
        vals = values[metric]
        summary = (
            f"# {metric}: {len(vals)} value(s), min {min(vals):.4g}, median {statistics.median(vals):.4g}, "
            f"max {max(vals):.4g} {spec.unit}"
        )
        if spec.better == "higher":
            worst = min(vals)
            bounds = f"fail_below = {_number(worst * fractions.fail)}, warn_below = {_number(worst * fractions.warn)}"
        else:
            worst = max(vals)
            fail, warn = worst * (2 - fractions.fail), worst * (2 - fractions.warn)
            bounds = f"fail_above = {_number(fail)}, warn_above = {_number(warn)}"
        lines.append(summary)
        lines.append(f"{_quote(metric)} = {{ unit = {_quote(spec.unit)}, {bounds} }}")
    if not values:
        lines.append("# no judged measurement in this run: nothing to calibrate")
    return "\n".join(lines) + "\n"

"""A line a site has not set, for a check whose value is evidence beside the lines that decide
(storage speeds, the fabric's layers): the measurement is kept unjudged and the page warns what to
add, instead of leaving every cluster without that line not judged."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence

from pytest_gpucluster.config import ThresholdSet
from pytest_gpucluster.verdict import Finding


def missing_line(thresholds: ThresholdSet, metric: str, nodes: Sequence[str], guide: str) -> Finding:
    """The warning for ``metric``'s unset line in ``thresholds``: what to add, where, and ``guide``
    (the page that says what to expect)."""
    found = Finding.outside(
        "config",
        f"{metric} is not judged: {thresholds.missing(metric)} ({guide})",
        nodes=nodes,
        setting=f"thresholds.{thresholds.name}.{metric}",
        severity="warn",
    )
    return dataclasses.replace(found, metric=metric)


def is_missing_line(f: Finding) -> bool:
    """Whether ``f`` is ``missing_line``'s warning (by its fields)."""
    return f.scope == "config" and f.severity == "warn" and bool(f.metric) and f.setting.endswith(f".{f.metric}")


def fold_missing(findings: Iterable[Finding]) -> list[Finding]:
    """One check's unset-line warnings as one warning naming every line (the page says it once,
    not once a line), the other findings as they are."""
    found = list(findings)
    missing = [f for f in found if is_missing_line(f)]
    if len(missing) < 2:
        return found
    where = missing[0].setting.removesuffix(f".{missing[0].metric}")
    metrics = ", ".join(dict.fromkeys(f.metric for f in missing))
    text = (
        f"{len(missing)} figures are measured and not judged, no line being set for them in [{where}] "
        f"nor in [thresholds.default]: {metrics}. Add each there with its unit and bounds, or run with "
        "--gpucluster-calibrate=PATH on known-good nodes to write them from their measurements."
    )
    nodes = tuple(dict.fromkeys(n for f in missing for n in f.nodes))
    folded = Finding.outside("config", text, nodes=nodes, setting=where, severity="warn")
    first = found.index(missing[0])
    return [*found[:first], folded, *(f for f in found[first:] if not is_missing_line(f))]

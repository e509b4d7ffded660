"""A line a site has not set, for a check whose value is evidence beside the lines that decide
(storage speeds, the fabric's layers): the measurement is kept unjudged and the page warns what to
add, instead of leaving every cluster without that line not judged."""

from __future__ import annotations

from collections.abc import Sequence

from pytest_gpucluster.config import ThresholdSet
from pytest_gpucluster.verdict import Finding


def missing_line(thresholds: ThresholdSet, metric: str, nodes: Sequence[str], guide: str) -> Finding:
    """The warning for ``metric``'s unset line in ``thresholds``: what to add, where, and ``guide``
    (the page that says what to expect)."""
    return Finding.outside(
        "config",
        f"{metric} is not judged: {thresholds.missing(metric)} ({guide})",
        nodes=nodes,
        setting=f"thresholds.{thresholds.name}.{metric}",
        severity="warn",
    )

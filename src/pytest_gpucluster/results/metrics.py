"""A run's verdicts and figures in the Prometheus text format (``--gpucluster-metrics``, and
``python -m pytest_gpucluster metrics RESULTS`` for a results file already written): a ``.prom``
file for node_exporter's textfile collector, so that a site's monitoring keeps each node's last
acceptance beside its other metrics, alerts on a node whose verdict is not ACCEPTED, and plots a
figure against its line from one handover to the next.

Everything is read from the typed results (``codec.decode_run``, ``codec.decode_recorded``), never
from a sentence. What the textfile collector needs is kept: each family's HELP and TYPE once, its
samples together, no timestamps (the collector refuses them), no series twice (a figure measured
twice at one place, such as two streams of one node, carries its detail as a label, and one alike
in that too a number), label values escaped, and the file replaced whole, never seen half written.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from datetime import datetime
from pathlib import Path
from typing import Any, get_args

from pytest_gpucluster.results import codec
from pytest_gpucluster.verdict.nodes import NodeOverall
from pytest_gpucluster.verdict.run import Overall

# Each family: its name, type and help, in the order the file gives them.
FAMILIES: tuple[tuple[str, str, str], ...] = (
    ("gpucluster_run_info", "gauge", "The run: its profile, thresholds set and file checksum, and how it ended."),
    ("gpucluster_run_verdict", "gauge", "The run's verdict: 1 for the verdict given, 0 for the others."),
    ("gpucluster_run_finished_timestamp_seconds", "gauge", "When the run ended (Unix time)."),
    ("gpucluster_run_checks", "gauge", "Checks of the run by outcome (pass, warn, fail, n/a, not_judged, ...)."),
    ("gpucluster_node_verdict", "gauge", "Each tested node's verdict: 1 for the verdict given, 0 for the others."),
    ("gpucluster_check_verdict", "gauge", "Each check's outcome (its pytest node id): 1 for the outcome given."),
    ("gpucluster_measurement", "gauge", "Each judged figure, in its unit, where it was measured."),
    ("gpucluster_measurement_line", "gauge", "The line each figure was judged against (bound: fail_below, ...)."),
)
CHECK_OUTCOMES = ("pass", "warn", "fail", "xfail", "xpass", "n/a", "not_judged", "fault", "interrupted")
BOUNDS = ("fail_below", "warn_below", "fail_above", "warn_above")


def _escape(value: str) -> str:
    """A label value as the text format writes it."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _sample(name: str, labels: Mapping[str, str], value: float) -> str:
    inner = ",".join(f'{k}="{_escape(v)}"' for k, v in labels.items())
    number = "NaN" if math.isnan(value) else {math.inf: "+Inf", -math.inf: "-Inf"}.get(value, repr(float(value)))
    return f"{name}{{{inner}}} {number}" if inner else f"{name} {number}"


def _stateset(name: str, key: str, given: str, states: Iterable[str], **labels: str) -> list[str]:
    """One sample a state, 1 for ``given`` and 0 for the others (a state not listed is added)."""
    every = list(dict.fromkeys([*states, given]))
    return [_sample(name, {**labels, key: s}, 1.0 if s == given else 0.0) for s in every]


def _timestamp(text: Any) -> float | None:
    try:
        return datetime.fromisoformat(str(text)).timestamp()
    except ValueError:
        return None


def samples(doc: Mapping[str, Any]) -> dict[str, list[str]]:
    """Each family's sample lines for the results document ``doc`` (one whose verdicts are recorded:
    ``codec.with_verdicts``)."""
    recorded = codec.decode_recorded(doc)
    run = codec.decode_run(doc)
    env = doc.get("environment") or {}
    out: dict[str, list[str]] = {name: [] for name, _, _ in FAMILIES}
    profile = str(doc.get("profile", ""))
    out["gpucluster_run_info"].append(
        _sample(
            "gpucluster_run_info",
            {
                "profile": profile,
                "thresholds_set": str(env.get("thresholds_set", "")),
                "thresholds_sha256": str(doc.get("thresholds_sha256", "")),
                "status": run.status,
            },
            1.0,
        )
    )
    out["gpucluster_run_verdict"] += _stateset(
        "gpucluster_run_verdict", "verdict", recorded.acceptance.verdict, get_args(Overall), profile=profile
    )
    finished = _timestamp(doc.get("finished"))
    if finished is not None:
        out["gpucluster_run_finished_timestamp_seconds"].append(
            _sample("gpucluster_run_finished_timestamp_seconds", {"profile": profile}, finished)
        )
    counts = dict(recorded.acceptance.counts)
    for outcome in dict.fromkeys([*CHECK_OUTCOMES, *counts]):
        out["gpucluster_run_checks"].append(
            _sample("gpucluster_run_checks", {"profile": profile, "outcome": outcome}, float(counts.get(outcome, 0)))
        )
    for v in recorded.nodes.verdicts:
        out["gpucluster_node_verdict"] += _stateset(
            "gpucluster_node_verdict", "verdict", v.verdict, get_args(NodeOverall), node=v.node
        )
    seen: dict[tuple[str, ...], int] = {}
    figures: list[tuple[dict[str, str], Any]] = []
    for check in run.tests:
        out["gpucluster_check_verdict"].append(
            _sample(
                "gpucluster_check_verdict",
                {"nodeid": check.nodeid, "node": check.node, "verdict": check.verdict},
                1.0,
            )
        )
        for verdict in check.verdicts:
            m = verdict.measurement
            labels = {
                "metric": m.metric,
                "unit": m.unit,
                "where": m.where,
                "node": m.nodes[0] if len(m.nodes) == 1 else "",
                "gpu": "" if m.gpu is None else str(m.gpu),
                "check": check.nodeid.split("::")[-1],
            }
            key = tuple(labels.values())
            seen[key] = seen.get(key, 0) + 1
            figures.append((labels, verdict))
    again: dict[tuple[str, ...], int] = {}
    for labels, verdict in figures:
        if seen[tuple(labels.values())] > 1:
            labels = {**labels, "detail": verdict.measurement.detail}
            # Alike in the detail too (a figure measured again): each its own series, numbered.
            key = tuple(labels.values())
            again[key] = again.get(key, 0) + 1
            if again[key] > 1:
                labels["n"] = str(again[key])
        out["gpucluster_measurement"].append(_sample("gpucluster_measurement", labels, verdict.measurement.value))
        for bound in BOUNDS:
            line = getattr(verdict.threshold, bound)
            if line is not None and verdict.status != "unjudged":
                out["gpucluster_measurement_line"].append(
                    _sample("gpucluster_measurement_line", {**labels, "bound": bound}, float(line))
                )
    return out


def exposition(doc: Mapping[str, Any]) -> str:
    """The whole file for ``doc``: every family with samples, HELP and TYPE first."""
    by_family = samples(doc)
    parts: list[str] = []
    for name, kind, text in FAMILIES:
        if by_family[name]:
            parts += [f"# HELP {name} {text}", f"# TYPE {name} {kind}", *by_family[name]]
    return "\n".join(parts) + "\n"


def write(path: Path, doc: Mapping[str, Any]) -> None:
    """Write the metrics of ``doc`` to ``path``, replaced whole (the collector may read at any moment)."""
    codec.replace_whole(path, exposition(doc))

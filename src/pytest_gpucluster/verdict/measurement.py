"""Measurement × threshold → pass / warn / fail, with one sentence a customer can read."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

from pytest_gpucluster.config import Threshold
from pytest_gpucluster.verdict.finding import Finding

Status = Literal["pass", "warn", "fail", "xfail"]
# A measurement kept without a judgement: thresholds.toml has no bound for it (``Judge``).
UNJUDGED = "unjudged"


@dataclass(frozen=True)
class Measurement:
    """One measured value and where it was measured: ``nodes`` (one node, or several measured
    together), ``gpu`` on a node, ``culprits`` of a measurement of several nodes whose bad nodes
    were isolated; ``where`` says it for people (``node1``, ``node1:gpu2``, ``node1+node2``).
    ``at`` and ``across`` set them together."""

    metric: str
    value: float
    unit: str
    where: str = ""
    detail: str = ""
    job_id: str | None = None
    nodes: tuple[str, ...] = ()
    gpu: int | None = None
    culprits: tuple[str, ...] = ()

    @classmethod
    def at(
        cls,
        metric: str,
        value: float,
        unit: str,
        node: str,
        *,
        gpu: int | None = None,
        detail: str = "",
        job_id: str | None = None,
    ) -> Measurement:
        """A measurement of ``node`` (of its GPU ``gpu``)."""
        where = f"{node}:gpu{gpu}" if gpu is not None else node
        return cls(metric, value, unit, where, detail, job_id, (node,), gpu, (node,))

    @classmethod
    def across(
        cls,
        metric: str,
        value: float,
        unit: str,
        nodes: tuple[str, ...] | list[str],
        *,
        culprits: tuple[str, ...] | list[str] = (),
        detail: str = "",
        job_id: str | None = None,
    ) -> Measurement:
        """A measurement of several nodes together; ``culprits``: the nodes isolated as bad."""
        named = tuple(nodes)
        return cls(metric, value, unit, "+".join(named), detail, job_id, named, None, tuple(culprits))


@dataclass(frozen=True)
class Verdict:
    """The judgement of one measurement."""

    measurement: Measurement
    threshold: Threshold
    status: Status | Literal["unjudged"]
    sentence: str

    @property
    def origin(self) -> str:
        """What the line rests on (``Threshold.origin``), or ``missing`` for a measurement no line judged."""
        return "missing" if self.status == UNJUDGED else self.threshold.origin

    @property
    def proves_path(self) -> bool:
        """A pass against a line that only proves a path works (``Threshold.path_only``): the
        path carried the work, and the value is no pass of a speed."""
        return self.status == "pass" and self.threshold.path_only

    def finding(self) -> Finding | None:
        """The finding a verdict past a line is (None for a pass or an expected failure): of the
        measured node or GPU, or of the nodes measured together and the culprits isolated."""
        if self.status not in ("warn", "fail"):
            return None
        m = self.measurement
        more: dict[str, Any] = {"metric": m.metric, "value": m.value, "unit": m.unit, "job_id": m.job_id or ""}
        if len(m.nodes) == 1:
            return Finding.on_node(m.nodes[0], self.sentence, gpu=m.gpu, severity=self.status, **more)
        return Finding.across(m.nodes, self.sentence, culprits=m.culprits, severity=self.status, **more)


def _fmt(value: float) -> str:
    if value == 0 or 0.01 <= abs(value) < 1e6:
        return f"{value:.4g}" if abs(value) < 1000 else f"{value:.1f}"
    return f"{value:.3e}"


def judge(m: Measurement, t: Threshold) -> Verdict:
    """Compare ``m`` with ``t``. A NaN or a unit mismatch fails: a number that cannot be read
    must never pass."""
    subject = f"{m.where}: {m.metric}" if m.where else m.metric
    if m.detail:
        subject += f" ({m.detail})"
    value = f"{_fmt(m.value)} {m.unit}"
    if m.unit != t.unit:
        return Verdict(m, t, "fail", f"{subject} was measured in {m.unit} but {t.source} is in {t.unit}")
    if math.isnan(m.value):
        return Verdict(m, t, "fail", f"{subject} could not be measured (NaN); bounds: {t.describe()}")
    status: Status = "pass"
    line = ""
    if t.fail_below is not None and m.value < t.fail_below:
        status, line = "fail", f"below the fail line {_fmt(t.fail_below)} {t.unit}"
    elif t.fail_above is not None and m.value > t.fail_above:
        status, line = "fail", f"above the fail line {_fmt(t.fail_above)} {t.unit}"
    elif t.warn_below is not None and m.value < t.warn_below:
        status, line = "warn", f"below the warn line {_fmt(t.warn_below)} {t.unit}"
    elif t.warn_above is not None and m.value > t.warn_above:
        status, line = "warn", f"above the warn line {_fmt(t.warn_above)} {t.unit}"
    if status == "pass" and t.path_only:
        return Verdict(m, t, "pass", f"{subject} = {value}, path proven ({t.describe()} is a path line, not a speed)")
    if status == "pass":
        return Verdict(m, t, "pass", f"{subject} = {value}, within bounds ({t.describe()})")
    if status == "fail" and t.xfail:
        return Verdict(m, t, "xfail", f"{subject} = {value} is {line} (expected: {t.xfail})")
    return Verdict(m, t, status, f"{subject} = {value} is {line} ({t.describe()}; {t.source})")

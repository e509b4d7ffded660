"""Thin fixtures over the session: what acceptance tests ask for."""

from __future__ import annotations

import warnings
from collections.abc import Iterable
from typing import Any

import pytest

from pytest_gpucluster.config import Profile, Threshold, ThresholdSet
from pytest_gpucluster.fold import fold_lines
from pytest_gpucluster.outcomes import ThresholdWarning
from pytest_gpucluster.session import GpuClusterSession
from pytest_gpucluster.verdict import Measurement, Verdict, judge


def _session(config: pytest.Config) -> GpuClusterSession:
    from pytest_gpucluster.plugin import SESSION_KEY

    return config.stash[SESSION_KEY]


class Judge:
    """Judges measurements against thresholds and records every verdict on the test."""

    def __init__(self, session: GpuClusterSession) -> None:
        self._session = session
        self.verdicts: list[Verdict] = []

    def _one(self, m: Measurement, threshold: Threshold | str | None) -> Verdict:
        if threshold is None:
            threshold = m.metric
        t = self._session.thresholds[threshold] if isinstance(threshold, str) else threshold
        verdict = judge(m, t)
        self.verdicts.append(verdict)
        self._session.record({"kind": "measurement", **verdict.to_json()})
        if verdict.status == "warn":
            warnings.warn(ThresholdWarning(verdict.sentence), stacklevel=3)
        return verdict

    def __call__(self, m: Measurement, threshold: Threshold | str | None = None) -> Verdict:
        """Judge one measurement; fails the test at once on a fail verdict."""
        verdict = self._one(m, threshold)
        self._conclude([verdict])
        return verdict

    def all(self, measurements: Iterable[Measurement], threshold: Threshold | str | None = None) -> list[Verdict]:
        """Judge every measurement, then fail once listing every failure (not only the first)."""
        verdicts = [self._one(m, threshold) for m in measurements]
        self._conclude(verdicts)
        return verdicts

    def _conclude(self, verdicts: list[Verdict]) -> None:
        failed = [v for v in verdicts if v.status == "fail"]
        if failed:
            pytest.fail("\n".join(v.sentence for v in failed), pytrace=False)
        expected = [v for v in verdicts if v.status == "xfail"]
        if expected:
            pytest.xfail("; ".join(v.sentence for v in expected))

    def problems(self, problems: list[str], what: str) -> None:
        """Fail on the problems of a check that has no number to judge. Each problem is one
        sentence naming its culprit; the failure's first line holds them all, repeated ones
        folded (``fold.py``: ``node1:gpu0–3 link 0–17: ... (×72)``), so the one line a person
        reads first (terminal summary, report, results) names every culprit."""
        for problem in problems:
            self._session.record({"kind": "problem", "text": problem})
        if problems:
            pytest.fail("; ".join(fold_lines(dict.fromkeys(problems))) + f" ({what})", pytrace=False)


@pytest.fixture(scope="session")
def gpucluster(pytestconfig: pytest.Config) -> GpuClusterSession:
    """The run's session: profile, thresholds, launcher, nodes."""
    return _session(pytestconfig)


@pytest.fixture(scope="session")
def profile(gpucluster: GpuClusterSession) -> Profile:
    """The cluster profile chosen with --cluster."""
    return gpucluster.profile


@pytest.fixture(scope="session")
def thresholds(gpucluster: GpuClusterSession) -> ThresholdSet:
    """The thresholds in force (the GPU model's set laid over default)."""
    return gpucluster.thresholds


@pytest.fixture(name="judge")
def _judge(gpucluster: GpuClusterSession) -> Judge:
    """Judge measurements against thresholds.toml; every verdict lands in the results."""
    return Judge(gpucluster)


@pytest.fixture
def record(gpucluster: GpuClusterSession) -> Any:
    """``record(kind, **fields)`` attaches data (a sweep, an inventory) to the test's results."""

    def _record(kind: str, **fields: Any) -> None:
        gpucluster.record({"kind": kind, **fields})

    return _record

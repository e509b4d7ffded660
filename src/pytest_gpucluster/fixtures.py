"""Thin fixtures over the session: what acceptance tests ask for."""

from __future__ import annotations

import dataclasses
import re
import warnings
from collections.abc import Hashable, Iterable
from typing import Any

import pytest

from pytest_gpucluster.checks.lines import fold_missing
from pytest_gpucluster.config import Profile, Threshold, ThresholdSet
from pytest_gpucluster.errors import DeclarationError
from pytest_gpucluster.outcomes import COULD_NOT_JUDGE, GpuClusterWarning, ThresholdWarning
from pytest_gpucluster.phases import subject_node
from pytest_gpucluster.plan import JobRequest
from pytest_gpucluster.results import codec
from pytest_gpucluster.run import produce
from pytest_gpucluster.run.cluster import Cluster
from pytest_gpucluster.run.context import JobContext
from pytest_gpucluster.session import GpuClusterSession
from pytest_gpucluster.verdict import Finding, Measurement, Verdict, judge
from pytest_gpucluster.verdict.fold import fold_lines


def _session(config: pytest.Config) -> GpuClusterSession:
    from pytest_gpucluster.plugin import SESSION_KEY

    session = config.stash.get(SESSION_KEY, None)
    if session is None:
        pytest.fail(
            "this test uses pytest-gpucluster's fixtures in a run that tests no cluster: add --cluster=NAME "
            "(a profile of thresholds.toml), or set the ini key gpucluster_cluster",
            pytrace=False,
        )
    return session


# A place a site's check names in ``Measurement.where``: a node, or one of its GPUs.
NODE_NAME = re.compile(r"[A-Za-z0-9][\w.\-]*")
PLACE = re.compile(r"([A-Za-z0-9][\w.\-]*)(?::gpu(\d+))?")


class Judge:
    """Judges measurements against thresholds and records every verdict on the test, with the
    finding each one past a line is. ``node``: the node a per-node check tests, the place of a
    measurement that names none."""

    def __init__(self, session: GpuClusterSession, node: str = "") -> None:
        self._session = session
        self._node = node
        self.verdicts: list[Verdict] = []
        self.unjudged: list[str] = []  # why a measurement had no bound to be judged by

    def _one(self, m: Measurement, threshold: Threshold | str | None) -> Verdict | None:
        if threshold is None:
            threshold = m.metric
        t = self._session.thresholds.get(threshold) if isinstance(threshold, str) else threshold
        if not m.nodes:
            m = self._placed(m)
        if t is None:
            assert isinstance(threshold, str)
            self._unjudged(m, threshold)
            return None
        return self._record(judge(m, t))

    def _record(self, verdict: Verdict) -> Verdict:
        """Record a verdict, and the finding it is when past a line, on the test."""
        self.verdicts.append(verdict)
        self._session.record(codec.measurement_entry(verdict))
        found = verdict.finding()
        if found is not None:
            self._session.record(codec.finding_entry(found))
        if verdict.status == "warn":
            warnings.warn(ThresholdWarning(verdict.sentence), stacklevel=4)
        return verdict

    def verdict(
        self, made: Verdict | None, measurement: Measurement | None, metric: str, *, named: Iterable[Finding] = ()
    ) -> None:
        """Record a verdict a check made once (``checks.nccl.Check.verdict``, which its retries
        and bad-node isolation read too) and end the test by it, never judging again. Without a
        verdict, a measurement is kept unjudged (no bound for ``metric``: the check could not
        judge). ``named``: what the check named beside its measurement, each as what it is (the
        rounds over the switch tree: a node, a switch, a link); the verdict is then recorded
        without the finding it would make alone, and the test ends by those findings first."""
        found = list(named)
        if made is not None and found:
            self.attributed([made], (), found, metric)
            self._conclude([made])
            return
        if made is not None:
            self._conclude([self._record(made)])
            return
        if measurement is not None:
            self._unjudged(self._placed(measurement) if not measurement.nodes else measurement, metric)
        if found:  # without a bound only a wrong result is named: it fails all the same
            self.findings(found, metric)
        self._conclude([])

    def _placed(self, m: Measurement) -> Measurement:
        """A measurement given by its ``where`` alone (a site's check; the suite's own give
        ``Measurement.at``/``across``): the place as fields when ``where`` is a node name, a
        ``node:gpuN`` or nodes joined by ``+``; else the check's node, if it tests one."""
        named = PLACE.fullmatch(m.where)
        if named:
            node, gpu = named.group(1), named.group(2)
            return dataclasses.replace(m, nodes=(node,), gpu=int(gpu) if gpu else None, culprits=(node,))
        if "+" in m.where and all(NODE_NAME.fullmatch(n) for n in m.where.split("+")):
            return dataclasses.replace(m, nodes=tuple(m.where.split("+")))
        if self._node:
            return dataclasses.replace(m, nodes=(self._node,), culprits=(self._node,))
        return m

    def _unjudged(self, m: Measurement, metric: str) -> None:
        """Keep a measurement that thresholds.toml has no bound for: in the results (``--gpucluster-calibrate``
        writes lines from it), with the status ``unjudged`` and why."""
        why = self._session.thresholds.missing(metric)
        if why not in self.unjudged:
            self.unjudged.append(why)
        self._keep_unjudged(m)

    def _keep_unjudged(self, m: Measurement) -> None:
        thresholds = self._session.thresholds
        subject = f"{m.where}: {m.metric}" if m.where else m.metric
        line = Threshold(m.metric, m.unit, source=f"{thresholds.file} [thresholds.{thresholds.name}]")
        sentence = f"{subject} = {m.value:.4g} {m.unit}, not judged: no bound in set {thresholds.name!r}"
        self._session.record(codec.measurement_entry(Verdict(m, line, "unjudged", sentence)))

    def __call__(self, m: Measurement, threshold: Threshold | str | None = None) -> Verdict:
        """Judge one measurement; fails the test at once on a fail verdict. Without a bound for it
        the check could not judge: the measurement is kept and the check skipped, saying which bound
        is missing (the run is INCOMPLETE, never REJECTED for it)."""
        verdict = self._one(m, threshold)
        self._conclude([verdict] if verdict is not None else [])
        assert verdict is not None  # without a bound, _conclude has skipped the check
        return verdict

    def all(self, measurements: Iterable[Measurement], threshold: Threshold | str | None = None) -> list[Verdict]:
        """Judge every measurement, then fail once listing every failure (not only the first)."""
        verdicts = [v for v in (self._one(m, threshold) for m in measurements) if v is not None]
        self._conclude(verdicts)
        return verdicts

    def _conclude(self, verdicts: list[Verdict]) -> None:
        failed = [v for v in verdicts if v.status == "fail"]
        if failed:
            pytest.fail("\n".join(v.sentence for v in failed), pytrace=False)
        if self.unjudged:
            raise pytest.skip.Exception(COULD_NOT_JUDGE + "; ".join(self.unjudged), _use_item_location=True)
        expected = [v for v in verdicts if v.status == "xfail"]
        if expected:
            pytest.xfail("; ".join(v.sentence for v in expected))

    def attributed(
        self, verdicts: Iterable[Verdict], unjudged: Iterable[Measurement], findings: Iterable[Finding], what: str
    ) -> None:
        """End the test by the findings a check drew itself from its verdicts (``checks.storage``
        puts a shortfall on the node or on the shared filesystem): record each verdict's
        measurement, and each measurement no line judged (``--gpucluster-calibrate`` reads it),
        without the finding a verdict would make alone; then ``findings``."""
        for v in verdicts:
            self.verdicts.append(v)
            self._session.record(codec.measurement_entry(v))
        for m in unjudged:
            self._keep_unjudged(m)
        self.findings(fold_missing(findings), what)

    def findings(self, findings: Iterable[Finding], what: str) -> None:
        """Record every finding on the test and raise each warning (said beside a failure too),
        then end it by the worst: fail naming every failure (their sentences folded, then
        ``what``), else not judged (a finding that kept the check from judging), else pass."""
        found = list(findings)
        for f in found:
            self._session.record(codec.finding_entry(f))
        for f in found:
            if f.severity == "warn":
                warnings.warn(GpuClusterWarning(f.text), stacklevel=2)
        failed = [f.text for f in found if f.severity == "fail"]
        if failed:
            pytest.fail("; ".join(fold_lines(dict.fromkeys(failed))) + f" ({what})", pytrace=False)
        unjudged = [f.text for f in found if f.severity == "not_judged"]
        if unjudged:
            raise pytest.skip.Exception(COULD_NOT_JUDGE + "; ".join(dict.fromkeys(unjudged)), _use_item_location=True)

    def problems(self, problems: list[str], what: str) -> None:
        """Fail on problems given as sentences alone (a site's check; the suite's own give
        ``findings``): in a per-node check each is a finding of its node, in another check a
        finding of the tested nodes together that convicts none of them."""
        tested = self._session.nodes
        self.findings(
            [Finding.on_node(self._node, p) if self._node else Finding.across(tested, p) for p in problems], what
        )


class Measured:
    """The values of the jobs a test declares (``@pytest.mark.uses``): ``measured()`` is the value
    of its one declared job, ``measured(jobs.X)`` that of ``X``. Each is produced once per run
    (``run.produce``) with the test's parameters its producer takes (``node``, ``op``, ...);
    ``params`` given here set them explicitly."""

    def __init__(self, ctx: JobContext, item: pytest.Item) -> None:
        self._ctx = ctx
        self._item = item
        self._params = dict(getattr(getattr(item, "callspec", None), "params", {}))

    def declared(self) -> list[JobRequest]:
        return [r for mark in self._item.iter_markers("uses") for r in mark.args if isinstance(r, JobRequest)]

    def __call__(self, request: JobRequest | None = None, /, **params: Any) -> Any:
        if request is None:
            declared = list(dict.fromkeys(self.declared()))
            if len(declared) != 1:
                keys = ", ".join(r.key for r in declared) or "none"
                raise DeclarationError(
                    f"{self._item.nodeid}: measured() without a request needs exactly one declared job "
                    f"(@pytest.mark.uses), it has {keys}; name the one to read: measured(jobs.X)"
                )
            request = declared[0]
        return produce.value(self._ctx, request, **{**produce.taken(request, self._params), **params})


@pytest.fixture(scope="session")
def cluster(pytestconfig: pytest.Config) -> Cluster:
    """What a check knows of the cluster: tested nodes, GPUs, profile, thresholds, the plan."""
    return _session(pytestconfig).cluster


@pytest.fixture(scope="session")
def gpucluster(pytestconfig: pytest.Config) -> JobContext:
    """The run's job context, for a site's own job that no request declares: ``spec``,
    ``run``, ``submit``, ``once`` (the suite's checks read declared jobs through ``measured``)."""
    return _session(pytestconfig).jobs


@pytest.fixture
def measured(request: pytest.FixtureRequest, pytestconfig: pytest.Config) -> Measured:
    """The values of the jobs the test declares (``Measured``)."""
    return Measured(_session(pytestconfig).jobs, request.node)


@pytest.fixture(scope="session")
def profile(cluster: Cluster) -> Profile:
    """The cluster profile chosen with --cluster."""
    return cluster.profile


@pytest.fixture(scope="session")
def thresholds(cluster: Cluster) -> ThresholdSet:
    """The thresholds in force (the GPU model's set laid over default)."""
    return cluster.thresholds


@pytest.fixture(name="judge")
def _judge(request: pytest.FixtureRequest, pytestconfig: pytest.Config) -> Judge:
    """Judge measurements against thresholds.toml; every verdict lands in the results."""
    return Judge(_session(pytestconfig), subject_node(request.node))


_RECORDED_ONCE = pytest.StashKey[set[Hashable]]()


@pytest.fixture
def record(pytestconfig: pytest.Config) -> Any:
    """``record(kind, **fields)`` attaches data (a sweep, an inventory) to the test's results.
    ``record(kind, once=key, **fields)`` attaches it only where ``key`` is first recorded in the
    run: data that several checks read (a node's telemetry series) lands on the first of them."""
    session = _session(pytestconfig)
    recorded = pytestconfig.stash.setdefault(_RECORDED_ONCE, set())

    def _record(kind: str, *, once: Hashable | None = None, **fields: Any) -> None:
        if once is not None:
            if once in recorded:
                return
            recorded.add(once)
        session.record({"kind": kind, **fields})

    return _record

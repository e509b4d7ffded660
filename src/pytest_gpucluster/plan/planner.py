"""The planner: the selected tests' job requests and the run's facts in, the run's plan out.

Rules, in the order they apply:
1. A request exists when its facts hold (``exists_if``, ``min_gpus``); a request no selected test
   uses is not in the plan.
2. A request rides inside its host (``rides_in``) when the plan has the host, the host's
   ``host_needs`` and the rider's ``ride_needs`` hold, and the process sees the whole selection
   (an xdist worker runs only the tests it is handed, so nothing rides there).
3. Light requests that do not ride start ahead, together, before the first test; of those that
   hold GPUs only the first by ``ahead_order`` does. Nothing starts ahead on an xdist worker.
4. Every other job runs when its first test needs it, after the jobs started ahead have ended, so
   a measurement never shares nodes with them.
5. A request that ``runs_last`` never starts ahead; the tests that use it run after every other
   test (``last_order``), so its job follows every other job of the run. One that runs
   ``after_checks`` (the soak) never starts ahead either; its tests run after the one-shot
   checks and before those of the ``runs_last`` jobs.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from pytest_gpucluster.plan.jobs import JobRequest


@dataclass(frozen=True)
class Facts:
    """What the planner knows of the run: GPUs per node and the facts requests may name."""

    gpus_per_node: int
    flags: frozenset[str] = frozenset()
    sees_whole_selection: bool = True  # False on an xdist worker


@dataclass(frozen=True)
class Use:
    """One selected test's use of a request, with the test parameters its start takes."""

    request: JobRequest
    test: str  # the test's node id: the plan says who reads what, the planner never matches on it
    params: tuple[tuple[str, Any], ...] = ()


@dataclass(frozen=True)
class PlannedJob:
    """A request in the plan: where it runs and when it starts."""

    request: JobRequest
    rides_in: str | None  # the host job's key, or None for a job of its own
    ahead: bool
    tests: tuple[str, ...]
    params: tuple[tuple[tuple[str, Any], ...], ...] = ()  # distinct parameter sets of its starts

    @property
    def key(self) -> str:
        return self.request.key

    def describe(self) -> str:
        """One line of the dry run."""
        if self.rides_in:
            where = f"rides in {self.rides_in}"
        elif self.ahead:
            where = "job of its own, started ahead"
        elif self.request.runs_last:
            where = "job of its own, after every other job (its tests run last)"
        elif self.request.after_checks:
            where = "job of its own, after the one-shot checks"
        else:
            where = "job of its own, when first needed"
        count = f", {len(self.params)} parameter sets" if len(self.params) > 1 else ""
        return f"{self.key}: {where}{count}; {self.request.what}; read by {len(self.tests)} test(s)"


@dataclass(frozen=True)
class Plan:
    """The run's jobs by key, in the order their requests were first used."""

    jobs: dict[str, PlannedJob] = field(default_factory=dict)
    dropped: dict[str, str] = field(default_factory=dict)  # request key → why the run has no such job

    def has(self, key: str) -> bool:
        """Whether the run has this job, on its own or riding in another."""
        return key in self.jobs

    def rides_in(self, key: str) -> str | None:
        """The host job ``key`` rides in, or None (not planned, or a job of its own)."""
        job = self.jobs.get(key)
        return job.rides_in if job is not None else None

    def riders(self, host: str) -> tuple[str, ...]:
        """The keys of the jobs riding in ``host``."""
        return tuple(j.key for j in self.jobs.values() if j.rides_in == host)

    def starts_ahead(self, key: str) -> bool:
        job = self.jobs.get(key)
        return job is not None and job.ahead

    @property
    def ahead(self) -> tuple[PlannedJob, ...]:
        return tuple(j for j in self.jobs.values() if j.ahead)

    def lines(self) -> list[str]:
        """The plan as a person reads it (the dry run prints these)."""
        out = [j.describe() for j in self.jobs.values()]
        out += [f"{key}: not in this run: {why}" for key, why in self.dropped.items()]
        return out


def _missing(request: JobRequest, facts: Facts) -> str | None:
    lacking = [f for f in request.exists_if if f not in facts.flags]
    if lacking:
        return f"the run lacks {', '.join(lacking)}"
    if request.min_gpus and facts.gpus_per_node < request.min_gpus:
        return f"nodes have {facts.gpus_per_node} GPU(s); it needs {request.min_gpus}"
    if request.max_gpus is not None and facts.gpus_per_node > request.max_gpus:
        return f"nodes have {facts.gpus_per_node} GPUs; it is for nodes of at most {request.max_gpus}"
    return None


def make_plan(uses: Iterable[Use], facts: Facts) -> Plan:
    """The plan for these uses (see the module's rules)."""
    order: list[str] = []
    requests: dict[str, JobRequest] = {}
    tests: dict[str, list[str]] = {}
    params: dict[str, list[tuple[tuple[str, Any], ...]]] = {}
    for use in uses:
        key = use.request.key
        if key not in requests:
            order.append(key)
            requests[key], tests[key], params[key] = use.request, [], []
        elif requests[key] != use.request:
            raise ValueError(f"two different requests share the key {key!r}: {requests[key]} and {use.request}")
        if use.test not in tests[key]:
            tests[key].append(use.test)
        if use.params not in params[key]:
            params[key].append(use.params)
    dropped = {k: why for k in order if (why := _missing(requests[k], facts)) is not None}
    present = [k for k in order if k not in dropped]
    rides = {k: _host(requests[k], present, requests, facts) for k in present}
    ahead = _ahead([requests[k] for k in present if rides[k] is None], facts)
    jobs = {k: PlannedJob(requests[k], rides[k], k in ahead, tuple(tests[k]), _real(params[k])) for k in present}
    return Plan(jobs, dropped)


def _host(request: JobRequest, present: Sequence[str], requests: dict[str, JobRequest], facts: Facts) -> str | None:
    host = request.rides_in
    if host is None or host not in present or not facts.sees_whole_selection:
        return None
    needs = (*request.ride_needs, *requests[host].host_needs)
    return host if all(n in facts.flags for n in needs) else None


def _ahead(own: Sequence[JobRequest], facts: Facts) -> set[str]:
    if not facts.sees_whole_selection:
        return set()
    light = [r for r in own if r.light and not r.runs_last and not r.after_checks]
    holding = sorted((r for r in light if r.holds_gpus), key=lambda r: r.ahead_order)
    return {r.key for r in light if not r.holds_gpus} | ({holding[0].key} if holding else set())


def _real(sets: list[tuple[tuple[str, Any], ...]]) -> tuple[tuple[tuple[str, Any], ...], ...]:
    return tuple(s for s in sets if s) if any(sets) else ()


def last_order(requests: Sequence[Iterable[JobRequest]]) -> list[int]:
    """The order to run tests in, given each test's requests in collection order: the one-shot
    checks, then every test that uses an ``after_checks`` request, then every test that uses a
    ``runs_last`` request, each group in its own order."""

    def tier(uses: Iterable[JobRequest]) -> int:
        found = list(uses)
        return 2 if any(r.runs_last for r in found) else 1 if any(r.after_checks for r in found) else 0

    tiers = [tier(uses) for uses in requests]
    return sorted(range(len(tiers)), key=lambda i: tiers[i])

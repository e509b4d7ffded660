"""The machine-readable results file: one JSON document, rewritten atomically after every test so
an interrupted run keeps everything it measured (after a test that ends right after the last
rewrite, the next test's rewrite or the run's end carries it: ``ResultsDocument.checkpoint``).

The schema is documented in ``docs/results-schema.md`` (``schema_version`` 2). Fields are only
ever added within a version; renaming or removing one bumps the version. A test's verdicts and
findings are held as objects; ``codec.py`` makes the file's JSON and reads it back.

This module is pure: it folds pytest reports into records by duck typing (``nodeid``, ``when``,
``outcome``, ``duration``, ``user_properties``, ``longrepr``) and never imports pytest.
"""

from __future__ import annotations

import datetime as _dt
import os
import re
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict, cast

from pytest_gpucluster.outcomes import decide, reason_of
from pytest_gpucluster.plan.selection import Selection
from pytest_gpucluster.results import codec
from pytest_gpucluster.results.codec import PROPERTY
from pytest_gpucluster.results.timing import timing_summary
from pytest_gpucluster.verdict import CheckResult, Finding, RunRecord, Stopped, Verdict

if TYPE_CHECKING:
    from pytest_gpucluster.plan.planner import Plan

LOG_TAIL_LINES = 30
LOG_TAIL_CHARS = 4000
# Every rewrite holds every test so far, so a rewrite after every test costs the run O(tests²)
# (with 8-GPU nodes, hundreds of tests each rewrite a document of hundreds of KB). After a test the file
# is rewritten once this many times the last rewrite's duration has passed since it ended, so the
# rewrites take at most about a tenth of the run and the file lags the run by no more than that.
CHECKPOINT_COST_RATIO = 10.0
LOG_FILES_PER_JOB = 4


def now_iso() -> str:
    """The current time, UTC, ISO 8601, seconds."""
    return _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")


# Record kinds kept whole under the test's own key: the fabric check's per-port and per-link
# counters, the Xid check's sources and events, the across-node rounds, the straggler check's
# rounds of node pairs.
DETAIL_KINDS = ("fabric", "xid", "storage", "rounds", "pairs")


def entries_of(user_properties: Iterable[Any]) -> list[dict[str, Any]]:
    """The plugin's data entries among a report's ``user_properties``."""
    out = []
    for prop in user_properties:
        if len(prop) == 2 and prop[0] == PROPERTY and isinstance(prop[1], dict):
            out.append(prop[1])
    return out


def _tail(path: Path) -> str:
    try:
        with path.open("rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - 64 * 1024))
            text = f.read().decode("utf-8", errors="replace")
    except OSError:
        return ""
    lines = text.rstrip().splitlines()[-LOG_TAIL_LINES:]
    return "\n".join(lines)[-LOG_TAIL_CHARS:]


def job_log_tails(folder: str | Path, job_id: str) -> list[dict[str, str]]:
    """The end of a submitit job's logs (``<folder>/<job_id>_<task>_log.err`` and ``.out``):
    every task's non-empty stderr first, else task 0's stdout; at most a few files."""
    base = Path(folder)
    found: list[dict[str, str]] = []

    def task_of(p: Path) -> int:
        middle = p.name[len(job_id) + 1 :].split("_", 1)[0]
        return int(middle) if middle.isdigit() else 0

    for suffix in ("err", "out"):
        paths = sorted(base.glob(f"{glob_escape(job_id)}_*_log.{suffix}"), key=task_of)
        for path in paths:
            tail = _tail(path)
            if tail and len(found) < LOG_FILES_PER_JOB:
                found.append({"kind": "log", "job_id": job_id, "path": str(path), "tail": tail})
        if found:
            break
    return found


def glob_escape(text: str) -> str:
    """``text`` with glob metacharacters bracketed, for a literal match."""
    return re.sub(r"([\[\]*?])", r"[\1]", text)


class JobEntry(TypedDict, total=False):
    """One job a test used (``GpuClusterSession.submit``); times are epoch seconds."""

    job_id: str
    name: str
    folder: str
    submitted_at: float
    process_from: float
    ran_from: float
    ran_to: float
    workload_s: float
    seen_at: float
    parts: dict[str, list[float]]  # area → [from, to] of its phase in a job serving several areas
    start_up: dict[str, float]  # its tasks' start-up: wall median and max, CPU median (launch.start_up_summary)


class SeriesEntry(TypedDict, total=False):
    """A plotted series (``record("series", ...)``)."""

    kind: str  # "series"
    name: str
    where: str
    x_label: str
    y_label: str
    x_log: bool
    points: list[list[float]]
    threshold: float | None


class LogEntry(TypedDict):
    """The end of a failed job's log, read by the process that ran the test."""

    job_id: str
    path: str
    tail: str


@dataclass
class TestRecord:
    """What one test did, assembled from its setup/call/teardown reports."""

    nodeid: str
    node: str = ""  # the node a per-node check tests (its ``node`` parameter), as a field
    outcome: str = "unknown"
    duration_s: float = 0.0
    message: str = ""
    job_ids: list[str] = field(default_factory=list)
    jobs: list[JobEntry] = field(default_factory=list)
    verdicts: list[Verdict] = field(default_factory=list)  # its measurements' verdicts (unjudged ones too)
    series: list[SeriesEntry] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    logs: list[LogEntry] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)  # what the check warned of (GpuClusterWarning)
    unjudged: str = ""  # an error that is no judgement (a harness fault): the exception's type
    # A fault outside the nodes stopped the check (faults.py): {"what", "sentence"}; not judged.
    cluster_fault: dict[str, str] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)
    # The check's typed result, made once its last phase is folded in (``conclude``).
    result: CheckResult | None = field(default=None, repr=False)

    def conclude(self) -> CheckResult:
        """The check's typed result, its outcome decided here (``outcomes.decide``) and nowhere
        else: pass, warn, fail, xfail, xpass, n/a, not_judged, fault or interrupted."""
        verdicts = tuple(self.verdicts)
        findings = tuple(self.findings)
        warned = bool(self.warnings) or any(v.status == "warn" for v in verdicts)
        warned = warned or any(f.severity == "warn" for f in findings)
        outcome = decide(
            outcome=self.outcome,
            message=self.message,
            warned=warned,
            harness_error=bool(self.unjudged) and not self.cluster_fault,
            fault=bool(self.cluster_fault),
        )
        fault = self.cluster_fault
        return CheckResult(
            nodeid=self.nodeid,
            verdict=outcome,
            node=self.node,
            outcome=self.outcome,
            message=self.message,
            verdicts=verdicts,
            findings=findings,
            warnings=tuple(self.warnings),
            unjudged=self.unjudged,
            stopped=Stopped(fault.get("what", ""), fault.get("sentence", "")) if fault else None,
            not_applicable=reason_of(self.message) if outcome == "n/a" else "",
            job_ids=tuple(self.job_ids),
        )

    def typed(self) -> CheckResult:
        """Its result: as concluded, or, for a check still running, as it stands now."""
        return self.result if self.result is not None else self.conclude()

    @property
    def verdict(self) -> str:
        """The check's outcome (``CheckResult.verdict``)."""
        return self.typed().verdict

    @property
    def problems(self) -> list[str]:
        """The sentences of what the check found failing, culprit first."""
        return [f.text for f in self.findings if f.severity == "fail"]

    def add_warning(self, text: str) -> None:
        """Record a warning once (pytest reports a check's warnings after its last phase: its
        result is concluded again with them)."""
        if text not in self.warnings:
            self.warnings.append(text)
            if self.result is not None:
                self.result = self.conclude()


def _outcome(report: Any) -> str:
    outcome = str(report.outcome)
    if hasattr(report, "wasxfail"):
        return "xfailed" if report.skipped else "xpassed"
    if report.when != "call" and report.failed:
        return "error"
    return outcome


def _message(report: Any) -> str:
    if report.skipped and isinstance(report.longrepr, tuple):
        return str(report.longrepr[2])
    if hasattr(report, "wasxfail") and report.skipped:
        return str(report.wasxfail)
    if report.failed:
        crash = getattr(report.longrepr, "reprcrash", None)
        return _without_worker_line(str(getattr(crash, "message", "") or report.longreprtext))[-4000:]
    return ""


def _without_worker_line(text: str) -> str:
    """A failure's text without the line pytest-xdist puts first (``[gw0] linux -- Python 3.11.7
    /path``): the message a reader wants is the one after it."""
    first, sep, rest = text.partition("\n")
    return rest if sep and re.match(r"\[gw\d+\] \S+ -- Python ", first) else text


@dataclass
class ResultsDocument:
    """The whole results file, held in memory by the controlling process."""

    profile: str
    thresholds_file: str = ""
    thresholds_origin: str = ""  # an option, the rootdir's file, or the one the plugin ships
    thresholds_sha256: str = ""
    environment: dict[str, Any] = field(default_factory=dict)
    nodes: list[str] = field(default_factory=list)
    inventory: dict[str, Any] = field(default_factory=dict)
    started: str = field(default_factory=now_iso)
    finished: str | None = None
    status: str = "running"
    tests: dict[str, TestRecord] = field(default_factory=dict)
    cluster: dict[str, Any] = field(default_factory=dict)
    selection: Selection | None = None  # the required set and what the selection left out
    plan: Plan | None = None  # the run's jobs as planned
    soak: dict[str, Any] = field(default_factory=dict)  # the soak's cycles and verdicts (checks.soak.section)
    extra: dict[str, Any] = field(default_factory=dict)
    t0: float = field(default_factory=time.monotonic, repr=False)
    wall_s: float | None = None  # set by freeze() when the last test has ended
    _written_at: float = field(default=0.0, repr=False)  # monotonic end of the last rewrite
    _write_s: float = field(default=0.0, repr=False)  # how long the last rewrite took

    def elapsed_s(self) -> float:
        """Seconds since the run started; fixed once ``freeze`` was called."""
        return self.wall_s if self.wall_s is not None else time.monotonic() - self.t0

    def freeze(self) -> None:
        """End the run's wall time now (the last test has ended; clean-up is not the run's)."""
        if self.wall_s is None:
            self.wall_s = time.monotonic() - self.t0

    def close(self, *, interrupted: bool) -> None:
        """The run has ended: its status (``complete``, or ``interrupted`` unless a status was
        already set), every test that started and never reported a result marked interrupted,
        and the end time."""
        if self.status == "running":
            self.status = "interrupted" if interrupted else "complete"
        for record in self.tests.values():
            if record.outcome == "unknown":
                record.outcome = "interrupted"
                record.message = record.message or "the run was interrupted during this test"
            if record.result is None or record.outcome == "interrupted":
                record.result = record.conclude()
        self.finished = now_iso()

    def run_record(self) -> RunRecord:
        """The run as its verdicts read it: the checks' typed results as concluded, no JSON between."""
        env = self.environment
        return RunRecord(
            tests=tuple(t.typed() for t in self.tests.values()),
            nodes=tuple(self.nodes),
            inventory=tuple(self.inventory),
            lost=dict(env.get("lost_nodes") or {}),
            excluded={str(k): str(v) for k, v in (env.get("excluded_nodes") or {}).items()},
            selection=codec.encode_selection(self.selection) if self.selection is not None else None,
            status=self.status,
        )

    def timing(self, tests: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        """Where the run's time went (``timing_summary``), from the tests' records."""
        return timing_summary(
            tests if tests is not None else [codec.encode_test(t) for t in self.tests.values()], self.elapsed_s()
        )

    def record(self, nodeid: str) -> TestRecord:
        """The record for ``nodeid``, created on first use."""
        if nodeid not in self.tests:
            self.tests[nodeid] = TestRecord(nodeid)
        return self.tests[nodeid]

    def fold(self, report: Any) -> TestRecord:
        """Fold one phase's report (setup, call or teardown) into its test's record.

        ``user_properties`` grow over a test's phases, so the data lists are replaced by the
        latest phase's; log tails are attached to the failing phase only and accumulate.
        """
        rec = self.record(report.nodeid)
        rec.duration_s += float(report.duration or 0.0)
        self.fold_entries(rec, entries_of(report.user_properties))
        if report.when == "call" or report.outcome != "passed":
            # A teardown error after a failed call keeps "failed": the call is what was judged.
            if not (report.when == "teardown" and rec.outcome == "failed"):
                rec.outcome = _outcome(report)
            message = _message(report)
            if message and not (report.when == "teardown" and rec.message):
                rec.message = message
        if report.when == "teardown":
            rec.result = rec.conclude()
        return rec

    def fold_interrupted(self, nodeid: str, user_properties: Iterable[Any]) -> None:
        """What a test recorded before the run was interrupted during it (no report of it will
        come): its jobs, findings and data are kept; ``close`` marks it interrupted."""
        self.fold_entries(self.record(nodeid), entries_of(user_properties))

    def fold_entries(self, rec: TestRecord, entries: list[dict[str, Any]]) -> None:
        """Fold a test's data entries into its record and the document."""
        if entries:
            by_kind: dict[str, list[dict[str, Any]]] = {}
            for e in entries:
                by_kind.setdefault(str(e.get("kind")), []).append(e)
            # What a worker handed over as plain data is held as objects again (``codec``).
            rec.verdicts = [codec.decode_verdict(e) for e in by_kind.get("measurement", [])]
            rec.series = [cast(SeriesEntry, e) for e in by_kind.get("series", [])]
            rec.findings = [codec.decode_finding(e) for e in by_kind.get("finding", [])]
            for e in by_kind.get("subject", []):
                rec.node = str(e.get("node", ""))
            jobs = {str(e["job_id"]): e for e in by_kind.get("job", []) if "job_id" in e}
            rec.jobs = [cast(JobEntry, _without_kind(e)) for e in jobs.values()]
            rec.job_ids = list(jobs)
            known = {log["path"] for log in rec.logs}
            new_logs = [e for e in by_kind.get("log", []) if e.get("path") not in known]
            rec.logs += [cast(LogEntry, _without_kind(e)) for e in new_logs]
            for e in by_kind.get("environment", []):
                self.environment.update(e.get("facts", {}))
            for e in by_kind.get("inventory", []):
                self.inventory.update(e.get("nodes", {}))
            for kind in DETAIL_KINDS:
                for e in by_kind.get(kind, []):
                    rec.extra[kind] = _without_kind(e)
            for e in by_kind.get("unjudged", []):
                rec.unjudged = str(e.get("exception", "error"))
            for e in by_kind.get("cluster_fault", []):
                rec.cluster_fault = {"what": str(e.get("what", "")), "sentence": str(e.get("sentence", ""))}
                rec.unjudged = f"cluster fault: {rec.cluster_fault['what']}"
            for e in by_kind.get("soak", []):
                self.soak = dict(e.get("section") or {})

    def to_json(self) -> dict[str, Any]:
        """The document as written to disk (``codec.encode_document``)."""
        return codec.encode_document(self)

    def write(self, path: Path, document: dict[str, Any] | None = None) -> None:
        """Rewrite ``path`` atomically, with ``document`` where the caller has already made it
        (``to_json``) for another writer too."""
        t0 = time.monotonic()
        codec.write(path, self.to_json() if document is None else document)
        self._written_at = time.monotonic()
        self._write_s = self._written_at - t0

    def checkpoint(self, path: Path) -> bool:
        """Rewrite ``path`` after a test unless the last rewrite ended less than
        ``CHECKPOINT_COST_RATIO`` times its own duration ago; True when it was rewritten."""
        if self._written_at and time.monotonic() - self._written_at < CHECKPOINT_COST_RATIO * self._write_s:
            return False
        self.write(path)
        return True


def _without_kind(entry: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in entry.items() if k != "kind"}

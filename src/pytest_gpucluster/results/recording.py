"""pytest hooks that record the run into its results document: each test's reports, job log
tails, readable JUnit properties, the checks' warnings, the ``--gpucluster-baseline`` comparison (judged as
one more test) and, after the run's verdict, the ``--gpucluster-calibrate`` file; and the terminal summary
(rendered by ``report/terminal.py``). The verdict itself is decided and recorded at the session's
``pytest_sessionfinish`` (``results/finish.py``). The pytest-html integration
(``report/pytest_html_hooks.py``) registers itself; nothing here knows about it.

Data path: tests attach ``("gpucluster", {...})`` entries to ``user_properties``. Where a test
runs (an xdist worker or the only process), a failed phase gets the end of its jobs' logs
appended. In the controlling process, each report is first folded into the results document
(``tryfirst``), then its data entries are replaced by readable ``(name, text)`` pairs, so JUnit
XML and every later reader see ``nccl.all_reduce.intra_node[node1] = 354.2 GB/s pass (...)``
instead of a dict's repr. The report and the results file read the folded document, never the
reports.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import Any

import pytest
from _pytest import junitxml  # its stash key: the test suite's properties (as record_testsuite_property)

from pytest_gpucluster.errors import ConfigError, DeclarationError, GpuClusterError
from pytest_gpucluster.outcomes import GpuClusterWarning, is_not_applicable
from pytest_gpucluster.report import model, terminal
from pytest_gpucluster.report.node_fixes import node_fixes
from pytest_gpucluster.results import codec
from pytest_gpucluster.results.baseline import REGRESSION_METRIC, Comparison, compare
from pytest_gpucluster.results.calibrate import Margins, Run, calibrate, check_comparable, read_run, set_name_for
from pytest_gpucluster.results.codec import PROPERTY
from pytest_gpucluster.results.document import entries_of, job_log_tails
from pytest_gpucluster.session import GpuClusterSession

BASELINE_NODEID = "baseline::test_no_regression_against_baseline"
# Exceptions that are a judgement (pytest.fail, assert) or the cluster's answer (a failed job, a
# refused submission): a check ending in any other exception could not judge.
JUDGED: tuple[type[BaseException], ...] = (pytest.fail.Exception, AssertionError, GpuClusterError)


def junit_family(config: pytest.Config) -> str:
    """The JUnit XML family of this run (``junit_family``; "" where the junitxml plugin is off)."""
    try:
        return str(config.getini("junit_family"))
    except ValueError:
        return ""


class BaselineWarning(UserWarning):
    """The baseline was measured on a different environment; its comparison may mislead."""


class CalibrationWarning(UserWarning):
    """The calibrated thresholds could not be written where --gpucluster-calibrate says."""


@pytest.hookimpl(trylast=True)
def pytest_configure(config: pytest.Config) -> None:
    """Build the recording hooks on the run's session."""
    from pytest_gpucluster.plugin import SESSION_KEY

    session = config.stash.get(SESSION_KEY, None)
    if session is None:
        return
    try:
        hooks = ResultsHooks(session, config)
    except ConfigError as exc:
        raise pytest.UsageError(str(exc)) from None
    config.pluginmanager.register(hooks, "gpucluster-results")


class ResultsHooks:
    """Results folding, JUnit properties, log tails, baseline, calibration and the terminal
    summary for one run."""

    def __init__(self, session: GpuClusterSession, config: pytest.Config) -> None:
        self.session = session
        self.config = config
        self.comparison: Comparison | None = None
        self.calibrated_path: Path | None = None
        self.baseline_doc: dict[str, Any] | None = None
        self.outputs = outputs = session.settings.outputs
        self.baseline_path = outputs.baseline_path
        self.calibrate_path = outputs.calibrate_path
        self.margins = Margins.for_run(outputs.calibrate_fail, outputs.calibrate_warn, session.gpu_model)
        self.per_test_properties = junit_family(config) in ("xunit1", "legacy")
        self.calibrate_from = self._calibration_runs(list(outputs.calibrate_from))
        results = session.results
        if results is None:
            return  # an xdist worker: only log tails are its business
        results.cluster = {
            "profile": session.profile.name,
            "description": session.profile.description,
            "executor": session.profile.executor,
            "gpu_model": session.gpu_model,
            "gpus_per_node": session.gpus_per_node,
            "nodes_expected": session.profile.nodes,
            **({"handover": parties} if (parties := session.profile.handover.to_json()) else {}),
        }
        if self.baseline_path is not None:
            try:
                self.baseline_doc = codec.load(self.baseline_path)
            except (OSError, ValueError) as exc:
                raise ConfigError(f"--gpucluster-baseline={outputs.baseline}: {exc}") from None
            session.thresholds[REGRESSION_METRIC]  # a missing bound fails now, not after the run

    def _calibration_runs(self, paths: list[str]) -> list[Run]:
        """The earlier runs ``--gpucluster-calibrate-from`` names, read and checked now, before any job."""
        if paths and self.calibrate_path is None:
            raise ConfigError(
                f"--gpucluster-calibrate-from={','.join(paths)}: says what to calibrate from; add "
                "--gpucluster-calibrate=PATH to say where the thresholds go."
            )
        runs = [read_run(Path(p).resolve(), "--gpucluster-calibrate-from") for p in paths]
        check_comparable(runs, self.session.profile.name, self.session.gpu_model, "--gpucluster-calibrate-from")
        return runs

    # ------------------------------------------------------------------ where tests run

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(
        self, item: pytest.Item, call: pytest.CallInfo[None]
    ) -> Generator[None, pytest.TestReport, pytest.TestReport]:
        """A failed phase carries the end of its jobs' logs (read here: the job folder of the
        local executor is private to the process that ran the test)."""
        report = yield
        judged = call.excinfo is not None and call.excinfo.errisinstance(JUDGED)
        if judged and call.excinfo is not None and call.excinfo.errisinstance(DeclarationError):
            judged = False  # the check's own declaration is wrong: no node's answer
        if report.failed and call.excinfo is not None and not judged:
            # Neither a judgement nor the cluster's answer: the check could not judge at all.
            report.user_properties.append((PROPERTY, {"kind": "unjudged", "exception": call.excinfo.typename}))
        if report.failed:
            for e in entries_of(item.user_properties):
                if e.get("kind") == "job" and e.get("folder"):
                    for tail in job_log_tails(e["folder"], str(e["job_id"])):
                        report.user_properties.append((PROPERTY, tail))
        return report

    # ------------------------------------------------------------------ controller

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """Fold the report into the results (rewritten after each test, ``checkpoint``), then give JUnit XML
        and later readers one readable property per measurement, job and problem."""
        results = self.session.results
        if results is None:
            return
        results.fold(report)
        if report.when == "teardown" and self.session.settings.results_path is not None:
            results.checkpoint(self.session.settings.results_path)
        entries = entries_of(report.user_properties)
        if entries:
            # xunit2, JUnit XML's default family, allows no properties on a test case: there the
            # run's verdict goes on the test suite (``pytest_sessionfinish``) and the rest is in
            # the results file.
            kept = [p for p in report.user_properties if not (p[0] == PROPERTY and isinstance(p[1], dict))]
            readable = model.junit_properties(entries) if self.per_test_properties else []
            report.user_properties = [*kept, *readable]

    def pytest_warning_recorded(self, warning_message: Any, when: str, nodeid: str, location: Any) -> None:
        """A check's own warnings (``GpuClusterWarning``) go on its record: the results, the
        report and the verdict count them. Reported after the check's last phase: the next
        check's write of the results file, or the run's last, carries them."""
        results = self.session.results
        category = getattr(warning_message, "category", None)
        if results is None or not nodeid or not isinstance(category, type):
            return
        if not issubclass(category, GpuClusterWarning) or nodeid not in results.tests:
            return
        results.tests[nodeid].add_warning(str(warning_message.message))

    def pytest_report_teststatus(self, report: pytest.TestReport, config: pytest.Config) -> Any:
        """A check that does not apply shows as ``n/a`` (``N``), one skipped or stopped by a fault
        outside the nodes as ``not judged`` (``J``): pytest's count line says what the verdict
        says. An expected failure keeps pytest's word."""
        if not report.skipped or hasattr(report, "wasxfail") or not isinstance(report.longrepr, tuple):
            return None
        if is_not_applicable(str(report.longrepr[2])):
            return "n/a", "N", "N/A"
        if "multinode" in report.keywords:  # an acceptance check (the session marks each one so)
            return "not judged", "J", "NOT JUDGED"
        return None

    @pytest.hookimpl(wrapper=True)
    def pytest_runtestloop(self, session: pytest.Session) -> Iterator[None]:
        """After the last test, judge regressions against the baseline as one more test, so a
        regression fails the run, JUnit XML and the report like any failed check."""
        result = yield
        if self.baseline_doc is not None and self.session.results is not None and not session.shouldstop:
            self._report_baseline()
        return result  # type: ignore[return-value]

    def _report_baseline(self) -> None:
        assert self.session.results is not None and self.baseline_doc is not None
        self.comparison = compare(
            self.session.results.to_json(),
            self.baseline_doc,
            self.session.thresholds[REGRESSION_METRIC],
            baseline_path=str(self.baseline_path),
        )
        self.session.results.extra["baseline"] = codec.encode_comparison(self.comparison)
        props = [(PROPERTY, codec.measurement_entry(v)) for v in self.comparison.verdicts]
        failed = self.comparison.failed
        longrepr = None
        if failed:
            longrepr = f"{len(failed)} regression(s) against {self.baseline_path}:\n" + "\n".join(
                c.verdict.sentence for c in failed
            )
        location = (str(self.baseline_path), None, BASELINE_NODEID.split("::")[-1])
        hook = self.config.hook
        hook.pytest_runtest_logstart(nodeid=BASELINE_NODEID, location=location)
        for when in ("setup", "call", "teardown"):
            outcome = "failed" if (when == "call" and failed) else "passed"
            now = time.time()
            report = pytest.TestReport(
                BASELINE_NODEID,
                location,
                keywords={BASELINE_NODEID: 1},
                outcome=outcome,  # type: ignore[arg-type]
                longrepr=longrepr if outcome == "failed" else None,
                when=when,
                sections=[],
                duration=0.0,
                start=now,
                stop=now,
                user_properties=list(props),
            )
            hook.pytest_runtest_logreport(report=report)
        hook.pytest_runtest_logfinish(nodeid=BASELINE_NODEID, location=location)

    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        """After the session has recorded the run's verdict (its own ``pytest_sessionfinish`` comes
        first): warn about an incomparable baseline and write the calibrated thresholds, whose
        header names this run's verdict."""
        results = self.session.results
        if results is None:
            return
        xml = self.config.stash.get(junitxml.xml_key, None)
        if xml is not None and "acceptance" in results.extra:
            for name, value in model.junit_suite_properties(results.to_json()):
                xml.add_global_property(name, value)
        if self.comparison is not None and self.comparison.environment_differences:
            warnings.warn(
                BaselineWarning(
                    f"--gpucluster-baseline={self.baseline_path} was measured on a different environment: "
                    + "; ".join(self.comparison.environment_differences)
                ),
                stacklevel=1,
            )
        if self.calibrate_path is not None:
            runs = list(self.calibrate_from)
            if any(t.verdicts for t in results.tests.values()):
                # The document as it now stands, with this run's verdict for the fragment's header.
                runs.append(Run(label=str(self.session.settings.results_path or "this run"), doc=results.to_json()))
            text = calibrate(
                runs,
                set_name=set_name_for(self.session.profile.name),
                match=self.session.gpu_model,
                extends=self.session.thresholds.name,
                margins=self.margins,
                catalogue=self.session.config.metrics,
            )
            try:
                self.calibrate_path.parent.mkdir(parents=True, exist_ok=True)
                self.calibrate_path.write_text(text, encoding="utf-8")
            except OSError as exc:
                warnings.warn(
                    CalibrationWarning(
                        f"--gpucluster-calibrate={self.calibrate_path}: cannot be written ({exc.strerror})"
                    ),
                    stacklevel=1,
                )
            else:
                self.calibrated_path = self.calibrate_path

    def _speaks_for_a_cluster(self) -> bool:
        # The verdict line is for acceptance runs: asked for a record, or a test used the cluster.
        outputs = self.outputs
        if self.session.settings.results_path or outputs.baseline or outputs.calibrate or outputs.html:
            return True
        assert self.session.results is not None
        return any(
            t.jobs or t.verdicts or t.problems or t.verdict == "n/a" for t in self.session.results.tests.values()
        )

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        """The acceptance verdict, regressions and the calibration file, at the end of the run
        (``report/terminal.py``)."""
        results = self.session.results
        if results is None or "acceptance" not in results.extra or not self._speaks_for_a_cluster():
            return
        if self.config.option.collectonly:  # --collect-only, --gpucluster-dry-run: nothing ran, nothing to judge
            return
        command = results.selection.command if results.selection is not None else []
        tests = [codec.encode_test(t) for t in results.tests.values()]
        shown = terminal.summary(
            results.extra,
            results.timing(tests),
            comparison=self.comparison,
            baseline_path=self.baseline_path,
            calibrated_path=self.calibrated_path,
            retest=terminal.retest_command(
                command, self.session.profile.executor, results.extra["acceptance"].get("nodes") or {}
            ),
            fixes=node_fixes({"tests": tests, "nodes": results.nodes}),
        )
        terminalreporter.write_sep("=", shown.headline, bold=True, **shown.colour)
        for text, bold in shown.lines:
            terminalreporter.write_line(text, bold=bold)

"""What the session does at each phase of one acceptance check: names the running test to the
run's runner and puts a per-node check's node on its record as a field; ends a check on a node
the run lost (or held by other work) before it starts; turns a check's ending exception into its
findings or into a fault outside the nodes; records the nodes lost during it. Each test's reports
are then folded into the results by ``results/recording.py``.
"""

from __future__ import annotations

from collections.abc import Generator, Iterator
from typing import TYPE_CHECKING, Any

import pytest

from pytest_gpucluster.errors import GpuClusterError, MissingThresholdError
from pytest_gpucluster.launch.faults import cluster_fault, error_findings
from pytest_gpucluster.outcomes import COULD_NOT_JUDGE, NOT_APPLICABLE, NOT_JUDGED
from pytest_gpucluster.results.codec import PROPERTY, finding_entry
from pytest_gpucluster.results.document import entries_of
from pytest_gpucluster.run.items import is_check
from pytest_gpucluster.run.runner import RunningTest, SharedFailure
from pytest_gpucluster.verdict import Finding

if TYPE_CHECKING:
    from pytest_gpucluster.session import GpuClusterSession


def subject_node(item: pytest.Item) -> str:
    """The node a per-node acceptance check tests (its ``node`` parameter), or ""."""
    callspec = getattr(item, "callspec", None)
    node = callspec.params.get("node") if callspec is not None else None
    return node if isinstance(node, str) and is_check(item) else ""


class CheckPhases:
    """The per-test hooks of one run's session."""

    def __init__(self, session: GpuClusterSession) -> None:
        self.session = session
        self._lost_recorded: dict[str, str] = {}

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item) -> Iterator[None]:
        """Track the running test so jobs and measurements are attributed to it; a per-node
        check's node goes on its record as a field. A test under way when the run is interrupted
        keeps in the results what it recorded (its jobs, findings, a soak's cycles)."""
        # The runner files what the test's jobs record on it, and names it as a value's reader.
        self.session.runner.test = RunningTest(item.nodeid, item.name, item.user_properties, PROPERTY)
        node = subject_node(item)
        if node:
            item.user_properties.append((PROPERTY, {"kind": "subject", "node": node}))
        try:
            return (yield)
        except KeyboardInterrupt:
            if self.session.results is not None:  # no report will come: keep what the test recorded so far
                self.session.results.fold_interrupted(item.nodeid, item.user_properties)
            raise
        finally:
            self.session.runner.test = None

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(self, item: pytest.Item) -> Iterator[None]:
        """A check that reads a bound thresholds.toml lacks could not judge: it is skipped with the
        reason naming the file, the set and the metric, never failed (the run is INCOMPLETE)."""
        try:
            return (yield)
        except MissingThresholdError as exc:
            raise pytest.skip.Exception(COULD_NOT_JUDGE + str(exc), _use_item_location=True) from None

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(
        self, item: pytest.Item, call: pytest.CallInfo[None]
    ) -> Generator[None, pytest.TestReport, pytest.TestReport]:
        """A failure shared with an earlier test (``run.runner.SharedFailure``) is reported in its
        one line, which names that test: the traceback is shown once, not under every test. The
        suite's own errors (a job refused, lost, timed out: ``GpuClusterError``) are reported as
        their message, which names the job, node and logs; the harness's traceback says nothing
        more to an operator (``--tb=long`` shows it)."""
        report = yield
        exc = call.excinfo.value if call.excinfo is not None else None
        if exc is not None and report.failed and is_check(item) and not self._recorded_failure(item, exc):
            # What the check's ending stands for, from the error's fields (faults.error_findings),
            # on the test itself: its later phases' reports carry what this one found.
            for f in error_findings(
                exc, node=subject_node(item), tested=self.session.nodes, lost=self.session.lost_nodes
            ):
                self._add(item, report, finding_entry(f))
        fault = cluster_fault(exc)
        if fault is not None:
            # Not a judgement of any node: the results mark the check not judged (faults.py), and
            # pytest counts it so.
            self._add(item, report, {"kind": "cluster_fault", "what": fault.what, "sentence": fault.sentence})
            self.session.jobs.note_fault(fault)
            if report.failed:
                report.outcome = "skipped"
                report.longrepr = (str(item.path), item.location[1] or 0, NOT_JUDGED + fault.sentence)
                return report
        if isinstance(exc, SharedFailure):
            report.longrepr = str(exc)
        elif isinstance(exc, GpuClusterError) and item.config.getoption("tbstyle", "auto") == "auto":
            report.longrepr = f"{type(exc).__module__}.{type(exc).__qualname__}: {exc}"
        return report

    @staticmethod
    def _add(item: pytest.Item, report: pytest.TestReport, entry: dict[str, Any]) -> None:
        """An entry on this phase's report and on the test, for the reports of its later phases
        (each report holds a copy of the test's entries as they stood)."""
        report.user_properties.append((PROPERTY, entry))
        item.user_properties.append((PROPERTY, entry))

    @staticmethod
    def _recorded_failure(item: pytest.Item, exc: BaseException) -> bool:
        """Whether the check ended by a judgement whose failures it recorded as findings already
        (``judge``): nothing more to derive from the exception."""
        if not isinstance(exc, (pytest.fail.Exception, AssertionError)):
            return False
        return any(
            e.get("kind") == "finding" and e.get("severity", "fail") == "fail" for e in entries_of(item.user_properties)
        )

    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        """A check on a node lost earlier in the run fails for that node with the first evidence
        (no job is tried on it again); so does an across-nodes check once fewer than 2 nodes are
        left, naming the lost nodes as its culprits, and a check of a node left against the others
        is then not applicable (nothing to judge it by). A check of a node other work holds, or
        across nodes when that leaves fewer than 2, is not judged, naming the holder (``NodesHeld``)."""
        callspec = getattr(item, "callspec", None)
        node = callspec.params.get("node") if callspec is not None else None
        if self.session.node_set.held and is_check(item):
            facts = {"held_nodes": dict(self.session.node_set.held)}  # to the results, also from an xdist worker
            item.user_properties.append((PROPERTY, {"kind": "environment", "facts": facts}))
            held = self.session.node_set.held_fault([node] if isinstance(node, str) else [])
            if held is None and item.get_closest_marker("across_nodes") and len(self.session.live_nodes) < 2:
                held = self.session.node_set.held_fault(self.session.nodes)
            if held is not None:
                raise held
        lost = self.session.lost_nodes
        if not lost:
            return
        if node in lost:
            pytest.fail(
                f"{node} was lost earlier in this run: {self.lost_evidence(node)}; not tested again", pytrace=False
            )
        if item.get_closest_marker("across_nodes") and len(self.session.live_nodes) < 2:
            gone = "; ".join(f"{n}: {self.lost_evidence(n)}" for n in lost)
            if isinstance(node, str):
                # A check of this node against the others, with none left: nothing to judge it by.
                raise pytest.skip.Exception(
                    f"{NOT_APPLICABLE}{node} has no other node left to be judged with after losing {gone}",
                    _use_item_location=True,
                )
            text = f"{len(self.session.live_nodes)} node(s) left after losing {gone}; this check needs 2"
            # The lost nodes are its culprits: a node left is not judged by it (nor rejected for it).
            found = Finding.across([*self.session.live_nodes, *lost], text, culprits=list(lost))
            item.user_properties.append((PROPERTY, finding_entry(found)))
            pytest.fail(text, pytrace=False)

    def lost_evidence(self, node: str) -> str:
        """How this run learned it lost ``node``: Slurm's state or what a job saw, when, and where."""
        return self.session.node_set.lost_record.evidence(node)

    def pytest_runtest_teardown(self, item: pytest.Item) -> None:
        """Nodes lost during this test go to the results, with when and how each was seen (also
        from xdist workers)."""
        lost = self.session.lost_nodes
        if lost and lost != self._lost_recorded:
            self._lost_recorded = lost
            seen = self.session.node_set.lost_record.seen
            facts = {n: dict(seen.get(n) or {"why": why}) for n, why in lost.items()}
            item.user_properties.append((PROPERTY, {"kind": "environment", "facts": {"lost_nodes": facts}}))

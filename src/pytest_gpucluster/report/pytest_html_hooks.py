"""The one module that speaks to pytest-html (4.x hooks). Loaded with the plugin; its
``pytest_configure`` registers the hooks in the controlling process only, and only when pytest-html
is active and ``--html`` is given. It reads the run's results document and nothing of
``results/recording.py``.

Page layout (the style sheet reorders pytest-html's blocks): title; acceptance summary (verdict,
cluster, nodes, GPUs, counts, failures, skips with reasons); environment and inventory; node ×
check matrix; plots; the soak, where one ran; baseline comparison; the results table with
measured / threshold / verdict / node-GPU / job columns, each row expanding to every measurement
and, for a failure, the end of its jobs' logs, the checks that do not apply one folded row per
reason after the others; pytest-html's own environment table last.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from html import escape
from typing import Any

import pytest
from pytest_html import extras as html_extras

from pytest_gpucluster import verdict
from pytest_gpucluster.report import html, model
from pytest_gpucluster.report.handover import ResultsFile
from pytest_gpucluster.results import codec
from pytest_gpucluster.session import GpuClusterSession
from pytest_gpucluster.verdict.attribution import path_cells
from pytest_gpucluster.verdict.findings import test_label


@pytest.hookimpl(trylast=True)
def pytest_configure(config: pytest.Config) -> None:
    """Register the HTML report hooks where the results document lives and pytest-html writes a
    report. Registered after pytest-html's own plugin, so these hooks run before its own."""
    from pytest_gpucluster.plugin import SESSION_KEY

    session = config.stash.get(SESSION_KEY, None)
    if session is None or session.results is None:
        return
    if config.getoption("htmlpath", None) and config.pluginmanager.hasplugin("html"):
        config.pluginmanager.register(HtmlReportHooks(session), "gpucluster-html")


class HtmlReportHooks:
    """pytest-html hook implementations over the run's results document."""

    def __init__(self, session: GpuClusterSession) -> None:
        self.session = session
        self.report_data: Any = None  # pytest-html's ReportData, handed to the title hook
        self._model: tuple[int, int, str] | None = None  # the inventory's id and size, and its GPU model

    def _doc(self) -> dict[str, Any]:
        assert self.session.results is not None
        return self.session.results.to_json()

    def _test(self, nodeid: str) -> dict[str, Any] | None:
        assert self.session.results is not None
        record = self.session.results.tests.get(nodeid)
        return codec.encode_test(record) if record is not None else None

    def _gpu_model(self) -> str:
        """The GPU model by the inventory's name once recorded, else the profile's. Every row of
        the results table asks; it is read again only when the inventory changed, since walking
        every node's GPUs for each row would grow as rows × nodes."""
        assert self.session.results is not None
        results = self.session.results
        key = (id(results.inventory), len(results.inventory))
        if self._model is None or self._model[:2] != key:
            self._model = (*key, model.gpu_model({"inventory": results.inventory, "cluster": results.cluster}))
        return self._model[2]

    @pytest.hookimpl(optionalhook=True)
    def pytest_html_report_title(self, report: Any) -> None:
        """``GPU cluster acceptance: nebius``."""
        report.title = f"GPU cluster acceptance: {self.session.profile.name}"
        self.report_data = report

    @pytest.hookimpl(optionalhook=True)
    def pytest_html_results_summary(
        self, prefix: list[str], summary: list[str], postfix: list[str], session: pytest.Session
    ) -> None:
        """Acceptance summary first; environment, matrix, plots, soak and baseline after pytest-html's
        counts. The last hook before pytest-html writes the page: the table's rows of checks that do
        not apply become one row per reason here, when every row is in."""
        doc = self._doc()
        recorded = codec.decode_recorded(doc)  # decided once, at the session's end (finish.py)
        written = self.session.settings.results_path  # written before pytest-html renders (tryfirst)
        results_file = ResultsFile.of(written) if written is not None else None
        prefix.extend([html.style(), html.acceptance_block(doc, recorded, results_file)])
        outcomes = getattr(self.report_data, "outcomes", None)
        if isinstance(outcomes, dict):
            relabel_outcomes(outcomes, recorded.acceptance.counts)
        data = getattr(self.report_data, "data", None)
        if isinstance(data, dict) and isinstance(data.get("tests"), dict):
            groups = html.not_applicable_groups(doc, recorded)
            data["tests"] = group_not_applicable(data["tests"], groups, nodes_tested(doc))
            if data.get("initialSort") == "result":
                # The rows are in pytest-html's order of results already, the not-applicable
                # groups after them; sorting by result again would put the groups first.
                data["initialSort"] = "original"
        postfix.extend(
            [
                html.environment_block(doc),
                html.matrix_block(recorded.matrix, path_cells(codec.decode_run(doc))),
                html.gpu_map_block(doc),
                html.plots_block(doc),
                html.rounds_block(doc),
                html.soak_block(doc),
                html.storage_block(doc),
                html.baseline_block(doc.get("baseline")),
                html.timing_block(doc),
            ]
        )

    @pytest.hookimpl(optionalhook=True)
    def pytest_html_results_table_header(self, cells: list[str]) -> None:
        """Measured, threshold, verdict, node/GPU and job columns after the test name."""
        cells[2:2] = html.TABLE_HEADER

    @pytest.hookimpl(optionalhook=True)
    def pytest_html_results_table_row(self, report: pytest.TestReport, cells: list[str]) -> None:
        """The test's worst measurement, its bounds, the verdict, the place and the jobs."""
        cells[2:2] = html.table_cells(self._test(report.nodeid), self._gpu_model())

    @pytest.hookimpl(optionalhook=True)
    def pytest_html_results_table_html(self, report: pytest.TestReport, data: list[str]) -> None:
        """A skipped check's log reads as its sentence, not as pytest's ``(path, line, message)``."""
        said = skip_sentence(report.longrepr) if report.skipped else None
        if said is not None and data and data[0] == escape(report.longreprtext) + "\n":
            data[0] = escape(said) + "\n"

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """At a test's last phase, attach its measurements, problems and log tails as an HTML
        extra (pytest-html renders the extras of all phases when the teardown arrives)."""
        if report.when != "teardown":
            return
        test = self._test(report.nodeid)
        details = html.details_of_test(test) if test else ""
        if details:
            report.extras = [*getattr(report, "extras", []), html_extras.html(details)]  # type: ignore[attr-defined]


def skip_sentence(longrepr: Any) -> str | None:
    """``("…/test_dcgm.py", 18, "Skipped: not applicable: dcgmi is not installed on node1")`` →
    ``Not applicable: dcgmi is not installed on node1``; None for anything but a skip's tuple."""
    if not (isinstance(longrepr, tuple) and len(longrepr) == 3 and isinstance(longrepr[2], str)):
        return None
    text = longrepr[2].removeprefix("Skipped: ").strip()
    return text[:1].upper() + text[1:] if text else "Skipped, no reason given"


def relabel_outcomes(outcomes: dict[str, dict[str, Any]], counts: Mapping[str, int]) -> None:
    """Name pytest-html's filter counts in the suite's words, so the two lines agree: its
    "Passed" holds the checks passed with warnings (``63 Passed (62 passed, 1 passed with
    warnings)``) and its "Skipped" the checks that do not apply (``13 Not applicable``)."""
    split = {"passed": ("pass", "warn"), "skipped": ("not_judged", "n/a")}
    for outcome, (plain, other) in split.items():
        entry = outcomes.get(outcome)
        if not isinstance(entry, dict) or not counts.get(other):
            continue
        words = html.COUNT_LABELS
        if not counts.get(plain):
            entry["label"] = words[other][0].upper() + words[other][1:]
        else:
            entry["label"] = f"{outcome.capitalize()} ({counts[plain]} {words[plain]}, {counts[other]} {words[other]})"


# pytest-html's order of results when it sorts by result (``initialOrder`` in its app.js).
RESULT_ORDER = ("Error", "Failed", "Rerun", "XFailed", "XPassed", "Skipped", "Passed")
# The cells of a not-applicable group's row that its own checks' rows do not share.
GROUP_EMPTY = ("measured", "threshold", "jobs", "links")

Row = dict[str, Any]


def group_not_applicable(
    table: Mapping[str, Sequence[Row]], groups: Mapping[str, Sequence[str]], nodes: Mapping[str, str]
) -> dict[str, list[Row]]:
    """pytest-html's table (its ``tests``: node id → one row per phase it shows) with the checks that
    do not apply as one row per reason: ``15 checks not applicable: profile 'local' has 1 node;
    this check needs 2``, the checks listed under it, folded. The other rows come first, in
    pytest-html's order of results (failures first), so the table opens with the checks that were
    judged. ``groups``: reason → the checks' labels (``test_nccl.py::test_x[node1]``), as
    ``html.not_applicable_groups`` gives them for the summary; ``nodes``: node id → the node a
    per-node check tests, for the row's Node/GPU cell."""
    nodeids = {test_label(nodeid): nodeid for nodeid in table}
    rest = {nodeid: list(rows) for nodeid, rows in table.items()}
    folded: dict[str, list[Row]] = {}
    for reason, checks in groups.items():
        members = [nodeids[label] for label in checks if label in nodeids]
        skipped = [row for nodeid in members for row in table[nodeid] if row.get("result") == "Skipped"]
        if not skipped:
            continue
        for nodeid in members:
            rest[nodeid] = [row for row in rest[nodeid] if row.get("result") != "Skipped"]
        where = verdict.hostlist(sorted({nodes[n] for n in members if nodes.get(n)}))
        folded[f"gpucluster-not-applicable-{len(folded) + 1}"] = [
            _group_row(reason, [test_label(n) for n in members], skipped, where)
        ]

    def rank(rows: Sequence[Row]) -> int:
        found = [RESULT_ORDER.index(r["result"]) for r in rows if r.get("result") in RESULT_ORDER]
        return min(found, default=len(RESULT_ORDER))

    ordered = sorted(((n, rows) for n, rows in rest.items() if rows), key=lambda item: rank(item[1]))
    return {**dict(ordered), **folded}


def nodes_tested(doc: Mapping[str, Any]) -> dict[str, str]:
    """Node id → the node a per-node check tests (its ``node`` field), for the checks that test one."""
    return {str(t.get("nodeid")): str(t["node"]) for t in doc.get("tests", []) if t.get("node")}


def _group_row(reason: str, checks: Sequence[str], rows: Sequence[Row], where: str) -> Row:
    """One row for the checks of one reason, made from their rows as pytest-html made them (the
    result, the verdict and any column another plugin added stay as the first row has them)."""
    title = f"{len(checks)} check{'s' if len(checks) != 1 else ''} not applicable: {reason}"
    seconds = [_seconds(str(r.get("duration", ""))) for r in rows]
    replaced = {
        "testId": title,
        "where": where,
        "duration": _duration(sum(s for s in seconds if s is not None))
        if None not in seconds
        else str(rows[0].get("duration", "")),
        **dict.fromkeys(GROUP_EMPTY, ""),
    }
    listing = html.cells_macro("not_applicable_checks", list(checks))
    row: Row = {**rows[0], "log": "", "extras": [html_extras.html(listing)]}
    cells = []
    for cell in rows[0].get("resultsTableRow", []):
        column = re.search(r'class="col-(\w+)', cell)
        if column is not None and column.group(1) in replaced:
            cell = html.cells_macro("cell", column.group(1), replaced[column.group(1)])
            if column.group(1) in row:  # a sortable column: pytest-html keeps its text for sorting
                row[column.group(1)] = re.sub(r"^<td[^>]*>|</td>$", "", cell)
        cells.append(cell)
    row["resultsTableRow"] = cells
    return row


def _seconds(duration: str) -> float | None:
    """pytest-html's duration text (``12 ms``, ``00:01:05``) in seconds; None for another form."""
    if found := re.fullmatch(r"(\d+) ms", duration.strip()):
        return int(found.group(1)) / 1000
    if found := re.fullmatch(r"(\d+):(\d+):(\d+)", duration.strip()):
        hours, minutes, seconds = map(int, found.groups())
        return hours * 3600 + minutes * 60 + seconds
    return None


def _duration(seconds: float) -> str:
    """Seconds as pytest-html writes a duration: ``12 ms`` below a second, else ``00:01:05``."""
    if seconds < 1:
        return f"{round(seconds * 1000)} ms"
    whole = round(seconds)
    return f"{whole // 3600:02d}:{whole % 3600 // 60:02d}:{whole % 60:02d}"

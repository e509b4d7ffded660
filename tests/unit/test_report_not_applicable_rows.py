"""pytest-html's results table on recorded results: the checks that do not apply are one row per
reason, ``15 checks not applicable: <reason>``, with the checks folded under it, after the checks
that were judged; the groups, their counts and their reasons are the summary's; no row shows a
Python literal. The rows are built as pytest-html 4 stores them (its ``tests`` data: node id → a
row per phase, with its cells and the text of its sortable columns)."""

from __future__ import annotations

import html as html_text
import re
from pathlib import Path
from typing import Any

import pytest

from pytest_gpucluster.report import html
from pytest_gpucluster.report.pytest_html_hooks import RESULT_ORDER, group_not_applicable, nodes_tested
from pytest_gpucluster.results import codec

SAMPLES = Path(__file__).resolve().parents[2] / "docs" / "samples"
# A Python literal in what a customer reads: a tuple or list of strings, a dict, a skip's tuple.
LITERAL = re.compile(r"\(\s*'|\['|\{'|', '|', \d+, ['\"]")
RESULT = {"passed": "Passed", "failed": "Failed", "skipped": "Skipped", "xfailed": "XFailed", "xpassed": "XPassed"}
SORTABLE = ("result", "testId", "duration", "measured", "verdict", "where")


def sample(name: str) -> dict[str, Any]:
    return codec.with_verdicts(codec.load(SAMPLES / f"results-{name}.json"))


def duration_text(seconds: float) -> str:
    """A duration as pytest-html writes it: ``12 ms`` below a second, else ``00:01:05``."""
    if seconds < 1:
        return f"{round(seconds * 1000)} ms"
    return f"{int(seconds // 3600):02d}:{int(seconds % 3600 // 60):02d}:{round(seconds % 60):02d}"


def pytest_html_table(doc: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """The table pytest-html keeps for these tests, with this plugin's cells (Measured, Threshold,
    Verdict, Node/GPU, Job) after the test's name, in the order the tests ran."""
    table = {}
    for t in doc["tests"]:
        result = RESULT.get(str(t["outcome"]), "Error")
        seconds = float(t.get("duration_s") or 0)
        cells = [
            f'<td class="col-result">{result}</td>',
            f'<td class="col-testId">{t["nodeid"]}</td>',
            *html.table_cells(t, "NVIDIA H100 80GB HBM3"),
            f'<td class="col-duration">{duration_text(seconds)}</td>',
            '<td class="col-links"></td>',
        ]
        row: dict[str, Any] = {"extras": [], "resultsTableRow": cells, "log": str(t.get("message", ""))}
        for cell in cells:
            column, text = re.search(r'class="col-(\w+)"', cell), re.search(r"<td.*?>(.*?)</td>", cell)
            if column and text and column.group(1) in SORTABLE:
                row[column.group(1)] = text.group(1)
        table[str(t["nodeid"])] = [row]
    return table


def grouped(doc: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    groups = html.not_applicable_groups(doc, codec.decode_recorded(doc))
    return group_not_applicable(pytest_html_table(doc), groups, nodes_tested(doc))


def summary_lines(doc: dict[str, Any]) -> list[str]:
    """The summary's "Not applicable to this profile" list, as text."""
    block = html.acceptance_block(doc, codec.decode_recorded(doc))
    found = re.search(
        r"<h3>Not applicable to this profile</h3>(.*?</ul>)(<details class=\"gc-more\">.*?</details>)?", block, re.S
    )
    assert found, "the summary lists the checks that do not apply"
    return [html_text.unescape(li) for li in re.findall(r"<li>(.*?)</li>", found.group(0), re.S)]


@pytest.mark.parametrize("name", ["h200-1gpu-local", "h100-2node-shared-gpu", "2x2-h200-gemm-node2"])
def test_checks_that_do_not_apply_are_one_row_per_reason_as_the_summary_groups_them(name):
    doc = sample(name)
    acc = codec.decode_recorded(doc).acceptance
    table = grouped(doc)
    rows = [row for rows in table.values() for row in rows]
    groups = [group[0] for key, group in table.items() if key.startswith("gpucluster-not-applicable-")]
    assert len(groups) == len(html.not_applicable_groups(doc, codec.decode_recorded(doc))) > 1
    # no check that does not apply keeps a row of its own
    not_applicable = {str(t["nodeid"]) for t in doc["tests"] if t["verdict"] == "n/a"}
    assert not not_applicable & set(table)
    assert len(rows) == len(doc["tests"]) - len(not_applicable) + len(groups)
    # each group row: the count and the reason, as the summary says them, the checks folded under it
    said = []
    for row in groups:
        count, _, reason = html_text.unescape(row["testId"]).partition(" not applicable: ")
        checks = re.findall(r'<li class="gc-mono">(.*?)</li>', row["extras"][0]["content"])
        assert count == f"{len(checks)} check{'s' if len(checks) != 1 else ''}"
        assert row["result"] == "Skipped" and "gc-s-na" in row["verdict"] and row["log"] == ""
        assert '<details class="gc-na-checks">' in row["extras"][0]["content"]  # folded until opened
        said.append(f"{reason} ({len(checks)}: {html.short_list([html_text.unescape(c) for c in checks], 3)})")
    assert said == summary_lines(doc)
    # the counts agree with the summary's count of checks that do not apply
    assert sum(len(re.findall("<li ", row["extras"][0]["content"])) for row in groups) == acc.counts["n/a"]
    assert acc.counts["n/a"] == len(acc.not_applicable) == len(not_applicable)
    assert f">{acc.counts['n/a']} not applicable</span>" in html.acceptance_block(doc, codec.decode_recorded(doc))
    # the table opens with the judged checks, in pytest-html's order of results; the groups last
    order = [RESULT_ORDER.index(row["result"]) for row in rows[: len(rows) - len(groups)]]
    assert order == sorted(order) and rows[len(rows) - len(groups) :] == groups
    # nothing in a row reads as a Python literal
    for row in rows:
        shown = " ".join([*row["resultsTableRow"], row["log"], *(e["content"] for e in row["extras"])])
        assert not LITERAL.search(html_text.unescape(re.sub(r"<[^>]+>", " ", shown))), row["testId"]


def test_a_reason_that_differs_only_by_node_is_one_row_naming_the_nodes():
    doc = sample("h100-2node-shared-gpu")
    rows = {html_text.unescape(rows[0]["testId"]): rows[0] for rows in grouped(doc).values()}
    dcgm = rows[
        "2 checks not applicable: dcgmi is not installed on node[1-2] and profile 'testbox-2node' "
        "does not require it (dcgm_required = false)"
    ]
    assert dcgm["where"] == "node[1-2]"
    assert '<td class="col-where">node[1-2]</td>' in dcgm["resultsTableRow"]
    checks = ["test_dcgm.py::test_dcgm_diagnostics[node1]", "test_dcgm.py::test_dcgm_diagnostics[node2]"]
    assert re.findall(r'<li class="gc-mono">(.*?)</li>', dcgm["extras"][0]["content"]) == checks
    # its duration is its checks' together, in pytest-html's form
    seconds = sum(float(t["duration_s"]) for t in doc["tests"] if t["nodeid"].endswith(tuple(checks)))
    assert dcgm["duration"] == duration_text(seconds) == "00:00:04"


def test_a_run_where_every_check_applies_keeps_every_row():
    doc = sample("64node-synthetic")
    assert not codec.decode_recorded(doc).acceptance.not_applicable
    assert set(grouped(doc)) == set(pytest_html_table(doc))

"""pytest-html's page of a run on the one-node local profile: the checks that do not apply are
one row per reason after the checks that were judged, each with its count, its reason and its
checks folded under it; the counts are the summary's and the filter line's; no Python tuple
anywhere on the page."""

from __future__ import annotations

import json
import re
from html import unescape

SUITE = """
import pytest
from pytest_gpucluster.verdict import Measurement

@pytest.mark.across_nodes
def test_pair():
    pass

@pytest.mark.across_nodes
@pytest.mark.parametrize("op", ["all_reduce", "all_gather"])
def test_pair_busbw(op):
    pass

@pytest.mark.gpu(8)
def test_eight_gpus():
    pass

@pytest.mark.gpu(8)
def test_eight_gpus_again():
    pass

def test_temperatures(judge):
    judge.all([Measurement("gpu.temperature", 40 + g, "C", where=f"node1:gpu{g}") for g in range(4)])

def test_hot(judge):
    judge(Measurement("gpu.temperature", 99, "C", where="node1:gpu0"))
"""


def test_checks_that_do_not_apply_are_one_folded_row_per_reason(gpc):
    gpc.makepyfile(test_cluster=SUITE)
    result = gpc.runpytest_subprocess("--html=report.html", "--self-contained-html", "--gpucluster-results=r.json")
    result.stdout.fnmatch_lines(["*gpucluster: REJECTED: 1 check failed (1 pass, 1 fail, 5 n/a)*"])
    page = (gpc.path / "report.html").read_text()
    doc = json.loads((gpc.path / "r.json").read_text())
    data = json.loads(unescape(re.search(r'data-jsonblob="(.*?)"', page).group(1)))

    rows = [(key, row) for key, rows in data["tests"].items() for row in rows]
    assert [unescape(row["testId"]) for _, row in rows] == [
        "test_cluster.py::test_hot",
        "test_cluster.py::test_temperatures",
        "3 checks not applicable: profile 'local' has 1 node; this check needs 2",
        "2 checks not applicable: profile 'local' has 0 GPU(s) per node (NVML found that many on this machine); "
        "this check needs 8",
    ]
    # the page keeps this order (failures first, the groups last) instead of sorting by result
    assert data["initialSort"] == "original"
    pair, eight = (row for key, row in rows if key.startswith("gpucluster-not-applicable-"))
    assert pair["result"] == "Skipped" and '<td class="col-verdict"><span class="gc-badge gc-s-na">n/a</span>' in (
        "".join(pair["resultsTableRow"])
    )
    listed = re.findall(r'<li class="gc-mono">(.*?)</li>', pair["extras"][0]["content"])
    assert listed == [
        "test_cluster.py::test_pair",
        "test_cluster.py::test_pair_busbw[all_reduce]",
        "test_cluster.py::test_pair_busbw[all_gather]",
    ]
    assert pair["extras"][0]["content"].startswith('<details class="gc-na-checks"><summary>3 checks</summary>')
    assert len(re.findall("<li ", eight["extras"][0]["content"])) == 2

    # the same groups and counts as the summary above the table and pytest-html's filter line
    summary = unescape(page.split('id="results-table"')[0])
    assert "profile 'local' has 1 node; this check needs 2 (3: test_cluster.py::test_pair, " in summary
    assert ">5 not applicable</span>" in summary and "5 Not applicable," in summary
    assert doc["acceptance"]["counts"]["n/a"] == 5

    # no skip's (path, line, message) tuple anywhere, in the page or in the rows its script draws
    assert not re.search(r"\(['\"][^'\"]*['\"], \d+, ['\"]", unescape(page))
    assert "Skipped: not applicable" not in json.dumps(data)

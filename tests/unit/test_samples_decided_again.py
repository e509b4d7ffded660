"""Every committed results sample (docs/samples/results-*.json), decided again and rendered with
today's code: the run's verdict, each node's verdict, the matrix and the lists the run recorded
under ``acceptance`` are what the sample holds; the key figures are its recorded measurements, as
recorded; each standalone page that tools/render-samples made from a sample states the sample's
sha256 and shows the key figures today's code shows.

Two samples were written before a run recorded its headline, its node verdicts and the n/a
checks (results-4xh200-local.json, results-4xh200-slurm.json, schema 1): their reasons name each
area none of whose checks ran (``area 'dcgm' was not run: ...``), today's name each check that was
not judged; the test holds those to the same skips, area by area."""

from __future__ import annotations

import copy
import json
import re
from html import unescape
from pathlib import Path
from typing import Any

import pytest

from pytest_gpucluster import verdict
from pytest_gpucluster.report import figures, html
from pytest_gpucluster.report.handover import ResultsFile
from pytest_gpucluster.report.model import measurement_value
from pytest_gpucluster.results import codec
from pytest_gpucluster.verdict.findings import test_label as label_of
from pytest_gpucluster.verdict.findings import worst

REPO = Path(__file__).resolve().parents[2]
SAMPLES = REPO / "docs" / "samples"
RESULTS = sorted(SAMPLES.glob("results-*.json"))
# Schema 1's counts under today's names (``results.upgraded`` reads a skip as not judged).
V1_COUNTS = {"skip": "not_judged", "error": "fail"}
# What the earliest samples recorded of their verdict: only these three keys.
EARLIEST = {"verdict", "reasons", "counts"}
# A node verdict's fields newer than some samples (what a re-test must pass: ``verdict.merge``):
# compared where the sample records them (test_a_node_lost_on_real_gpus_is_unfinished otherwise).
NODE_FIELDS_SINCE = ("unfinished", "unjudged")


def _as_recorded(fresh: dict[str, Any], recorded: dict[str, Any]) -> dict[str, Any]:
    """``acceptance.nodes`` decided again, less the node fields the sample's run did not record."""
    if any(k in v for v in recorded.get("verdicts", {}).values() for k in NODE_FIELDS_SINCE):
        return fresh
    verdicts = {n: {k: x for k, x in v.items() if k not in NODE_FIELDS_SINCE} for n, v in fresh["verdicts"].items()}
    return {**fresh, "verdicts": verdicts}


def recorded_and_decided(path: Path) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """The sample's ``acceptance`` as written, the verdicts decided again from its tests, and the
    document as the report reads it (its schema upgraded)."""
    recorded = json.loads(path.read_text(encoding="utf-8"))["acceptance"]
    doc = codec.load(path)
    fresh = copy.deepcopy(doc)
    fresh.pop("acceptance")
    return recorded, codec.encode_decided(verdict.decided(codec.decode_run(fresh))), doc


def test_every_sample_records_its_verdicts():
    assert len(RESULTS) >= 15
    for path in RESULTS:
        assert {"verdict", "counts"} <= set(json.loads(path.read_text())["acceptance"]), path.name


@pytest.mark.parametrize("path", RESULTS, ids=lambda p: p.stem.removeprefix("results-"))
def test_todays_code_decides_the_verdicts_the_sample_recorded(path: Path):
    recorded, fresh, _ = recorded_and_decided(path)
    assert fresh["verdict"] == recorded["verdict"]
    counts = {V1_COUNTS.get(k, k): 0 for k in recorded["counts"]}
    for k, n in recorded["counts"].items():
        counts[V1_COUNTS.get(k, k)] += n
    assert {k: n for k, n in fresh["counts"].items() if n} == {k: n for k, n in counts.items() if n}
    if set(recorded) == EARLIEST:
        return  # test_the_earliest_samples_name_the_same_skips
    for key in ("headline", "reasons", "warnings", "not_applicable", "not_selected", "failures", "nodes", "matrix"):
        if key in recorded:
            now = _as_recorded(fresh[key], recorded[key]) if key == "nodes" else fresh[key]
            assert now == recorded[key], f"{path.name}: acceptance.{key}"
    # every sample since schema 2 records all of them
    if json.loads(path.read_text())["schema_version"] >= 2:
        assert set(recorded) == set(fresh)


def test_the_earliest_samples_name_the_same_skips():
    earliest = [p for p in RESULTS if set(json.loads(p.read_text())["acceptance"]) == EARLIEST]
    assert [p.name for p in earliest] == ["results-4xh200-local.json", "results-4xh200-slurm.json"]
    for path in earliest:
        recorded, fresh, doc = recorded_and_decided(path)
        skipped = [t for t in doc["tests"] if t["verdict"] == "not_judged"]
        assert len(fresh["reasons"]) == len(skipped) == recorded["counts"]["skip"]
        # each area the run named as not run is one whose every check is among today's reasons
        for reason in recorded["reasons"]:
            area = re.match(r"area '(\w+)' was not run: ", reason)
            assert area, reason
            tests = [t for t in doc["tests"] if t["area"] == area.group(1)]
            assert tests and all(t in skipped for t in tests)
            assert all(any(r.startswith(label_of(t["nodeid"])) for r in fresh["reasons"]) for t in tests)


@pytest.mark.parametrize("path", RESULTS, ids=lambda p: p.stem.removeprefix("results-"))
def test_key_figures_are_the_recorded_measurements(path: Path):
    doc = codec.with_verdicts(codec.load(path))
    # the measurements with a value, by metric and by whether several nodes were measured together
    measured: dict[tuple[str, bool], list[dict[str, Any]]] = {}
    for t in doc["tests"]:
        for m in t.get("measurements", []):
            if isinstance(m.get("value"), (int, float)) and not codec.decode_verdict(m).proves_path:
                measured.setdefault((str(m["metric"]), len(m.get("nodes") or ()) > 1), []).append(m)
    shown = figures.key_figures(doc)
    for k in shown:
        # the worst value where it was measured, with the verdict the run recorded for it
        ms = measured[(k.metric, k.across)]
        assert any(measurement_value(m) == k.worst and str(m.get("where", "")) == k.where for m in ms)
        assert k.status == worst(str(m.get("status", "pass")) for m in ms)
    # a failing key figure is a failed check of the run
    if any(k.status == "fail" for k in shown):
        assert doc["acceptance"]["verdict"] == "REJECTED"
    # the handover sheet shows the recorded verdict, node verdicts and key figures
    page = html.acceptance_block(doc, codec.decode_recorded(doc))
    if shown:
        assert len(key_figure_rows(page)) == len(shown) + 1  # and the header
    else:
        assert "gc-key-figures" not in page
    assert f'<div class="gc-word">{doc["acceptance"]["verdict"]}</div>' in page
    nodes = doc["acceptance"]["nodes"]["verdicts"]
    if nodes:
        accepted = sum(1 for v in nodes.values() if v["verdict"] == "ACCEPTED")
        assert f'<td id="gc-sheet-accepted">{accepted} of {len(nodes)}' in page


def committed_pages() -> list[tuple[Path, Path]]:
    """(page, results file) for each committed standalone page that states the sample it was
    rendered from."""
    out = []
    for page in sorted(SAMPLES.glob("*.html")):
        stated = re.search(r'<td id="gc-sheet-results"><span[^>]*>([^<]+)</span>', page.read_text(encoding="utf-8"))
        if stated and (REPO / stated.group(1)).is_file():
            out.append((page, REPO / stated.group(1)))
    return out


def key_figure_rows(page: str) -> list[list[str]]:
    """The key figures' table of a page, a row as its words."""
    table = re.search(r'<table class="gc-key" id="gc-key-figures">(.*?)</table>', page, re.S)
    if table is None:
        return []
    return [unescape(re.sub(r"<[^>]+>", " ", row)).split() for row in re.findall(r"<tr>(.*?)</tr>", table.group(1))]


def test_committed_pages_show_todays_key_figures_of_their_sample():
    pages = committed_pages()
    assert {p.name for p, _ in pages} >= {"report-4xh200-slurm.html", "report-h100-2node-shared-gpu.html"}
    for page, results in pages:
        text = page.read_text(encoding="utf-8")
        stated = re.search(r'<td id="gc-sheet-results">.*?sha256 <span class="gc-mono gc-hash">(\w+)</span>', text)
        digest = ResultsFile.of(results)
        assert stated and digest and stated.group(1) == digest.sha256, f"{page.name} was rendered from {results.name}"
        doc = codec.with_verdicts(codec.load(results))
        fresh = html.acceptance_block(doc, codec.decode_recorded(doc), digest)
        assert key_figure_rows(text) == key_figure_rows(fresh), page.name


def test_a_node_lost_on_real_gpus_is_unfinished():
    # The GPU runs that lost node2 (its slurmd killed, its link cut): decided again, node2 is
    # marked as not tested in full, so only a whole re-test can accept it.
    lost = {}
    for path in RESULTS:
        doc = json.loads(path.read_text(encoding="utf-8"))
        for node in (doc.get("environment") or {}).get("lost_nodes") or {}:
            _, fresh, _ = recorded_and_decided(path)
            lost[(path.stem, node)] = fresh["nodes"]["verdicts"][node].get("unfinished")
    assert lost and all(lost.values()), lost
    assert ("results-2x1-h200-slurmd-killed", "node2") in lost

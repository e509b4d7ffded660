"""The results file's JSON against every committed sample (docs/samples/results-*.json): what the
codec decodes from a sample it encodes back to the same bytes, a worker's recorded entries are
written as it recorded them once the controller has held them as objects, and a schema-1 sample
is read in schema 2's words."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from pytest_gpucluster import verdict
from pytest_gpucluster.results import codec
from pytest_gpucluster.results.document import ResultsDocument
from pytest_gpucluster.verdict import Finding, Verdict

REPO = Path(__file__).resolve().parents[2]
SAMPLES = sorted((REPO / "docs" / "samples").glob("results-*.json"))


def _version(path: Path) -> int:
    return int(json.loads(path.read_text(encoding="utf-8"))["schema_version"])


CURRENT = [p for p in SAMPLES if _version(p) == codec.SCHEMA_VERSION]
OLDER = [p for p in SAMPLES if _version(p) == 1]
SCHEMA_1 = REPO / "docs" / "samples" / "results-4xh200-slurm.json"


def decoded_and_encoded(doc: dict[str, Any]) -> dict[str, Any]:
    """``doc`` with every part the codec types (verdicts, findings, the selection, the recorded
    verdicts) decoded into objects and encoded again."""
    again = copy.deepcopy(doc)
    for t in again["tests"]:
        t["measurements"] = [codec.measurement_entry(codec.decode_verdict(m)) for m in t["measurements"]]
        t["findings"] = [codec.encode_finding(codec.decode_finding(f)) for f in t["findings"]]
    if again.get("selection") is not None:
        again["selection"] = codec.encode_selection(codec.decode_selection(again["selection"]))
    if again.get("soak", {}).get("findings"):
        again["soak"]["findings"] = [codec.encode_finding(codec.decode_finding(f)) for f in again["soak"]["findings"]]
    again["acceptance"] = {**again["acceptance"], **codec.encode_decided(codec.decode_recorded(again))}
    return again


def test_the_samples_hold_both_schemas():
    assert len(CURRENT) >= 11 and len(OLDER) == 4 and len(CURRENT) + len(OLDER) == len(SAMPLES)


@pytest.mark.parametrize("path", CURRENT, ids=lambda p: p.stem.removeprefix("results-"))
def test_a_sample_decoded_and_encoded_again_is_the_file_written_from_it(path: Path, tmp_path: Path):
    loaded, again = tmp_path / "loaded.json", tmp_path / "again.json"
    codec.write(loaded, codec.load(path))
    codec.write(again, decoded_and_encoded(codec.load(path)))
    assert again.read_bytes() == loaded.read_bytes()
    if path.read_bytes().startswith(b"{\n"):  # written by the plugin (a synthetic sample is one line)
        assert loaded.read_bytes() == path.read_bytes()


@pytest.mark.parametrize("path", OLDER, ids=lambda p: p.stem.removeprefix("results-"))
def test_a_schema_1_measurement_is_read_the_same_once_written_in_schema_2(path: Path):
    doc = codec.load(path)
    for t in doc["tests"]:
        for m in t["measurements"]:
            first = codec.decode_verdict(m)
            written = codec.encode_verdict(first)
            # schema 1 named no nodes: written again they are empty, and the rest is as recorded
            assert (written["nodes"], written["gpu"], written["culprits"]) == ([], None, [])
            assert {k: v for k, v in written.items() if k in m and k != "threshold"} == {
                k: v for k, v in m.items() if k not in ("kind", "threshold")
            }
            assert codec.decode_verdict(written) == first


@pytest.mark.parametrize("path", CURRENT, ids=lambda p: p.stem.removeprefix("results-"))
def test_what_a_worker_records_is_written_as_it_recorded_it(path: Path):
    """The controller folds a worker's entries into objects (``fold_entries``) and the codec
    writes them: each test's measurements and findings come out as the sample recorded them."""
    sample = codec.load(path)
    results = ResultsDocument(sample["profile"])
    for t in sample["tests"]:
        rec = results.record(t["nodeid"])
        results.fold_entries(rec, [*t["measurements"], *({"kind": "finding", **f} for f in t["findings"])])
        assert all(isinstance(v, Verdict) for v in rec.verdicts) and all(isinstance(f, Finding) for f in rec.findings)
        written = codec.encode_test(rec)
        assert json.dumps(written["measurements"]) == json.dumps(t["measurements"])
        assert json.dumps(written["findings"]) == json.dumps(t["findings"])
        assert written["problems"] == [f["text"] for f in t["findings"] if f["severity"] == "fail"]


def test_a_schema_1_sample_is_read_in_schema_2s_words(tmp_path: Path):
    raw = json.loads(SCHEMA_1.read_text(encoding="utf-8"))
    assert raw["schema_version"] == 1 and "matrix" not in raw["acceptance"]
    doc = codec.load(SCHEMA_1)
    assert doc["schema_version"] == 2
    was = {t["nodeid"]: t for t in raw["tests"]}
    assert {was[t["nodeid"]]["verdict"] for t in doc["tests"]} == {"pass", "skip"}
    for t in doc["tests"]:
        # a skip is not judged; what passed stays passed
        assert t["verdict"] == {"skip": "not_judged"}.get(was[t["nodeid"]]["verdict"], was[t["nodeid"]]["verdict"])
        assert t["node"] == (t["params"] if t["params"] in raw["nodes"] else "")
        assert t["findings"] == []
    assert any(t["node"] == "node1" for t in doc["tests"])
    # the matrix its recorded verdict lacks, decided from its tests; the verdict it recorded stands
    assert codec.decode_matrix(doc["acceptance"]["matrix"]) == verdict.matrix(codec.decode_run(doc))
    assert {k: doc["acceptance"][k] for k in raw["acceptance"]} == raw["acceptance"]
    # written again, it is a schema-2 file that reads back as it was upgraded
    codec.write(tmp_path / "again.json", doc)
    assert codec.load(tmp_path / "again.json") == doc


def test_a_file_of_another_schema_or_none_is_refused(tmp_path: Path):
    path = tmp_path / "x.json"
    path.write_text(json.dumps({"schema_version": 99, "tests": []}))
    with pytest.raises(ValueError, match="schema_version 99; this plugin reads versions 1 and 2"):
        codec.load(path)
    path.write_text("[]")
    with pytest.raises(ValueError, match="not a pytest-gpucluster results file"):
        codec.load(path)

"""The JSON form of everything the results file holds and the xdist workers hand over, made and
read here and nowhere else: verdicts, findings, the run's and the nodes' verdicts, the matrix, a
merged handover, the selection, the plan, a baseline comparison, each test's record and the whole
document; the results file's write and load, and the upgrade of a version-1 file on load.

Everything else holds objects: a check records ``Verdict`` and ``Finding`` objects through
``measurement_entry`` and ``finding_entry`` (pytest-xdist carries a report's ``user_properties``
from a worker to the controller as plain data), the controller decodes them back into objects
when it folds the report (``ResultsDocument.fold_entries``), and they are encoded once more when
the file is written. ``decode_run`` reads a written file into the ``RunRecord`` the verdicts read,
so a file of an earlier run is judged by the same code as a run in progress.

The details a check keeps under its test's key (``DETAIL_KINDS`` of ``document.py``: the fabric
counters, the rounds, the storage streams) and the soak's section are made by the check where it
runs and are written as recorded; nothing here reads them.

Pure: no pytest. Field order is the schema's (``docs/results-schema.md``): a file written again
from what it decodes to is the same file, byte for byte.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from collections.abc import Mapping
from dataclasses import asdict, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_gpucluster import verdict
from pytest_gpucluster.config import Threshold
from pytest_gpucluster.errors import ConfigError
from pytest_gpucluster.outcomes import reason_of
from pytest_gpucluster.plan.selection import Selection
from pytest_gpucluster.verdict import (
    Acceptance,
    CheckResult,
    FailureLine,
    Finding,
    Matrix,
    Measurement,
    Nodes,
    NodeVerdict,
    Recorded,
    RunRecord,
    Stopped,
    Verdict,
)
from pytest_gpucluster.verdict.attribution import Cell
from pytest_gpucluster.verdict.check import split_nodeid
from pytest_gpucluster.verdict.merge import Handover

if TYPE_CHECKING:
    from pytest_gpucluster.plan.planner import Plan
    from pytest_gpucluster.results.baseline import Comparison
    from pytest_gpucluster.results.document import ResultsDocument, TestRecord

SCHEMA_VERSION = 2
# Version 1 wrote "skip" and "error" where version 2 decides "not_judged", "fault" or "fail"
# (outcomes.decide); a version-1 file is read with its tests' verdicts mapped (``upgraded``).
READS_VERSIONS = (1, SCHEMA_VERSION)


# ---------------------------------------------------------------------- verdicts and findings


def encode_verdict(v: Verdict) -> dict[str, Any]:
    """A measurement's verdict: the measurement's fields, its status and sentence, and the bounds
    set on its line with the line's origin (``missing`` for a measurement no line judged)."""
    m = asdict(v.measurement)
    m["nodes"], m["culprits"] = list(v.measurement.nodes), list(v.measurement.culprits)
    return {
        **m,
        "status": v.status,
        "sentence": v.sentence,
        "threshold": {
            **{
                k: value
                for k, value in asdict(v.threshold).items()
                if value not in (None, "") and value is not False and k not in ("metric", "unit")
            },
            "origin": v.origin,
        },
    }


def decode_verdict(data: Mapping[str, Any]) -> Verdict:
    """The verdict ``encode_verdict`` wrote (a measurement kept unjudged, too; an older file's,
    whose measurements name no nodes)."""
    value = data.get("value")
    metric, unit = str(data.get("metric", "")), str(data.get("unit", ""))
    gpu = data.get("gpu")
    job_id = data.get("job_id")
    measurement = Measurement(
        metric,
        value if isinstance(value, int | float) and not isinstance(value, bool) else math.nan,
        unit,
        str(data.get("where") or ""),
        str(data.get("detail") or ""),
        str(job_id) if job_id is not None else None,
        tuple(str(n) for n in data.get("nodes") or ()),
        int(gpu) if isinstance(gpu, int) else None,
        tuple(str(n) for n in data.get("culprits") or ()),
    )
    bounds = data.get("threshold") or {}
    known = {f.name for f in fields(Threshold)} - {"metric", "unit"}
    threshold = Threshold(metric, unit, **{k: v for k, v in bounds.items() if k in known})
    return Verdict(measurement, threshold, data.get("status", "pass"), str(data.get("sentence", "")))


def encode_finding(f: Finding) -> dict[str, Any]:
    """A finding: every field set, lists for tuples."""
    out = {k: v for k, v in asdict(f).items() if v not in (None, "", ())}
    out["nodes"], out["culprits"] = list(f.nodes), list(f.culprits)
    if f.threshold is not None:
        out["threshold"] = dict(f.threshold)
    return out


_FINDING_FIELDS = frozenset(f.name for f in fields(Finding))


def decode_finding(data: Mapping[str, Any]) -> Finding:
    """The finding ``encode_finding`` wrote (keys it does not know are left out)."""
    kwargs = {k: v for k, v in data.items() if k in _FINDING_FIELDS}
    kwargs["nodes"] = tuple(data.get("nodes") or ())
    kwargs["culprits"] = tuple(data.get("culprits") or ())
    return Finding(**kwargs)


# ---------------------------------------------------------------------- the hand-over

# Key of every ``user_properties`` entry the plugin adds: a worker's report carries them to the
# controller, which folds them into the results (``ResultsDocument.fold``).
PROPERTY = "gpucluster"


def measurement_entry(v: Verdict) -> dict[str, Any]:
    """A verdict as a test records it on its report (``record``): plain data a worker hands over."""
    return {"kind": "measurement", **encode_verdict(v)}


def finding_entry(f: Finding) -> dict[str, Any]:
    """A finding as a test records it on its report."""
    return {"kind": "finding", **encode_finding(f)}


def encode_selection(s: Selection) -> dict[str, Any]:
    """The selection as the results file holds it, and as a worker hands its view over
    (``workeroutput``)."""
    return {
        "command": s.command,
        "keyword": s.keyword,
        "markexpr": s.markexpr,
        "deselect": s.deselect,
        "named": s.named,
        "required": s.required,
        "optional": s.optional,
        "not_applicable": s.not_applicable,
        "not_selected": s.not_selected,
        "partial": s.partial,
    }


def decode_selection(data: Mapping[str, Any]) -> Selection:
    """The selection ``encode_selection`` wrote (``partial`` is worked out again)."""
    return Selection(
        command=list(data.get("command", [])),
        keyword=str(data.get("keyword", "")),
        markexpr=str(data.get("markexpr", "")),
        deselect=list(data.get("deselect", [])),
        named=list(data.get("named", [])),
        required=list(data.get("required", [])),
        optional=list(data.get("optional", [])),
        not_applicable=dict(data.get("not_applicable", {})),
        not_selected=list(data.get("not_selected", [])),
    )


# ---------------------------------------------------------------------- what the verdicts read


def decode_check(data: Mapping[str, Any]) -> CheckResult:
    """A test's record (``encode_test``) as the check's typed result, its outcome as recorded."""
    fault = data.get("cluster_fault") or {}
    outcome = str(data.get("verdict", "not_judged"))
    message = str(data.get("message", ""))
    return CheckResult(
        nodeid=str(data.get("nodeid", "")),
        verdict=outcome,  # type: ignore[arg-type]
        node=str(data.get("node") or ""),
        outcome=str(data.get("outcome", "unknown")),
        message=message,
        verdicts=tuple(decode_verdict(m) for m in data.get("measurements") or []),
        findings=tuple(decode_finding(f) for f in data.get("findings") or []),
        warnings=tuple(str(w) for w in data.get("warnings") or []),
        unjudged=str(data.get("unjudged") or ""),
        stopped=Stopped(str(fault.get("what", "")), str(fault.get("sentence", ""))) if fault else None,
        not_applicable=reason_of(message) if outcome == "n/a" else "",
        job_ids=tuple(str(j) for j in data.get("job_ids") or []),
    )


def decode_run(doc: Mapping[str, Any]) -> RunRecord:
    """A results document (``encode_document``, or a file of it) as the run its verdicts read."""
    env = doc.get("environment") or {}
    return RunRecord(
        tests=tuple(decode_check(t) for t in doc.get("tests") or []),
        nodes=tuple(str(n) for n in doc.get("nodes") or []),
        inventory=tuple(str(n) for n in doc.get("inventory") or {}),
        lost=dict(env.get("lost_nodes") or {}),
        excluded={str(k): str(v) for k, v in (env.get("excluded_nodes") or {}).items()},
        selection=doc.get("selection") or None,
        status=str(doc.get("status", "complete")),
    )


# ---------------------------------------------------------------------- the verdicts


def encode_acceptance(a: Acceptance) -> dict[str, Any]:
    """The run's verdict, its reasons and counts (``acceptance`` without ``nodes`` and ``matrix``)."""
    return {
        "verdict": a.verdict,
        "headline": a.headline,
        "reasons": list(a.reasons),
        "warnings": list(a.warnings),
        "not_applicable": list(a.not_applicable),
        "not_selected": list(a.not_selected),
        "counts": dict(a.counts),
        "failures": [{"text": f.text, "count": f.count, "nodeid": f.nodeid} for f in a.findings],
    }


def decode_acceptance(data: Mapping[str, Any]) -> Acceptance:
    """The run's verdict ``encode_acceptance`` wrote."""
    return Acceptance(
        data["verdict"],
        tuple(data.get("reasons", [])),
        dict(data.get("counts", {})),
        str(data.get("headline", "")),
        tuple(data.get("warnings", [])),
        tuple(data.get("not_applicable", [])),
        tuple(data.get("not_selected", [])),
        tuple(FailureLine(f["text"], int(f["count"]), f["nodeid"]) for f in data.get("failures", [])),
    )


def encode_node_verdict(v: NodeVerdict) -> dict[str, Any]:
    """One node's verdict, under its node's name; ``unfinished`` and ``unjudged`` only where they
    say something."""
    entry: dict[str, Any] = {"verdict": v.verdict, "reasons": list(v.reasons), "checks": list(v.checks)}
    if v.unfinished:
        entry["unfinished"] = True
    if v.unjudged:
        entry["unjudged"] = list(v.unjudged)
    return entry


def encode_nodes(n: Nodes) -> dict[str, Any]:
    """Every tested node's verdict (``acceptance.nodes``)."""
    return {
        "summary": n.summary,
        "exclude": n.exclude,
        "cluster_wide": list(n.cluster_wide),
        "verdicts": {v.node: encode_node_verdict(v) for v in n.verdicts},
    }


def decode_nodes(data: Mapping[str, Any]) -> Nodes:
    """The node verdicts ``encode_nodes`` wrote."""
    verdicts = tuple(
        NodeVerdict(
            str(n),
            v["verdict"],
            tuple(v.get("reasons", [])),
            tuple(v.get("checks", [])),
            unfinished=bool(v.get("unfinished", False)),
            unjudged=tuple(v.get("unjudged", [])),
        )
        for n, v in (data.get("verdicts") or {}).items()
    )
    wide = tuple(data.get("cluster_wide", []))
    return Nodes(verdicts, wide, str(data.get("summary", "")), str(data.get("exclude", "")))


def encode_matrix(m: Matrix) -> dict[str, Any]:
    """The node × check matrix (``acceptance.matrix``) the report renders."""
    return {
        "rows": list(m.rows),
        "columns": [list(c) for c in m.columns],
        "cells": [
            {"row": row, "column": list(col), "status": c.status, "lines": list(c.lines)}
            for (row, col), c in m.cells.items()
        ],
    }


def decode_matrix(data: Mapping[str, Any]) -> Matrix:
    """The matrix ``encode_matrix`` wrote."""
    cells = {
        (str(c["row"]), (str(c["column"][0]), str(c["column"][1]))): Cell(str(c["status"]), tuple(c["lines"]))
        for c in data.get("cells", [])
    }
    columns = tuple((str(a), str(b)) for a, b in data.get("columns", []))
    return Matrix(tuple(data.get("rows", [])), columns, cells)


def encode_decided(r: Recorded) -> dict[str, Any]:
    """The ``acceptance`` entry of the results: the run's verdict, each node's, and the matrix."""
    return {**encode_acceptance(r.acceptance), "nodes": encode_nodes(r.nodes), "matrix": encode_matrix(r.matrix)}


def decode_recorded(doc: Mapping[str, Any]) -> Recorded:
    """The verdicts a results document records (``encode_decided``); KeyError for a document
    without them."""
    entry = doc["acceptance"]
    return Recorded(decode_acceptance(entry), decode_nodes(entry["nodes"]), decode_matrix(entry["matrix"]))


def encode_handover(h: Handover) -> dict[str, Any]:
    """A re-test merged with an earlier run (``handover``): each node's verdict and the run it is from."""
    return {
        "verdict": h.verdict,
        "summary": h.summary,
        "exclude": h.exclude,
        "retested": list(h.retested),
        "partners": list(h.partners),
        "earlier": h.earlier,
        "earlier_started": h.earlier_started,
        "this_run": h.this_run,
        "cluster_wide": list(h.cluster_wide),
        "nodes": {m.node.node: {**encode_node_verdict(m.node), "from": m.source} for m in h.nodes},
    }


# ---------------------------------------------------------------------- the document


def encode_plan(plan: Plan) -> dict[str, Any]:
    """The run's jobs as planned (``plan``): each job's key, host, tests and starts, and the
    requests the run has no job for."""
    return {
        "jobs": [
            {
                "key": j.key,
                "rides_in": j.rides_in,
                "ahead": j.ahead,
                "tests": list(j.tests),
                "starts": len(j.params) or 1,
            }
            for j in plan.jobs.values()
        ],
        "not_planned": dict(plan.dropped),
    }


def encode_comparison(c: Comparison) -> dict[str, Any]:
    """The ``baseline`` section: this run against ``--gpucluster-baseline``."""
    changes = []
    for change in c.changes:
        metric, where, detail = change.key
        changes.append(
            {
                "metric": metric,
                "where": where,
                "detail": detail,
                "before": change.before,
                "after": change.after,
                "regression_pct": change.verdict.measurement.value,
                "status": change.verdict.status,
                "sentence": change.verdict.sentence,
            }
        )
    return {
        "path": c.baseline_path,
        "environment_differences": list(c.environment_differences),
        "changes": changes,
        "only_in_baseline": [list(k) for k in c.only_in_baseline],
        "only_in_run": [list(k) for k in c.only_in_run],
        "not_comparable": [list(k) for k in c.not_comparable],
    }


def encode_test(rec: TestRecord) -> dict[str, Any]:
    """One test's record, in the schema's order; its verdicts and findings encoded here."""
    area, name, params = split_nodeid(rec.nodeid)
    return {
        "nodeid": rec.nodeid,
        "node": rec.node,
        "area": area,
        "name": name,
        "params": params,
        "outcome": rec.outcome,
        "verdict": rec.verdict,
        "duration_s": round(rec.duration_s, 3),
        "job_ids": rec.job_ids,
        "jobs": rec.jobs,
        "message": rec.message,
        "measurements": [measurement_entry(v) for v in rec.verdicts],
        "series": rec.series,
        "problems": rec.problems,
        "findings": [encode_finding(f) for f in rec.findings],
        "warnings": rec.warnings,
        "unjudged": rec.unjudged,
        "cluster_fault": rec.cluster_fault or None,
        "logs": rec.logs,
        **rec.extra,
    }


def encode_document(doc: ResultsDocument) -> dict[str, Any]:
    """The whole document as written to disk."""
    return {
        "schema_version": SCHEMA_VERSION,
        "status": doc.status,
        "profile": doc.profile,
        "started": doc.started,
        "finished": doc.finished,
        "cluster": doc.cluster,
        "environment": doc.environment,
        "thresholds_file": doc.thresholds_file,
        "thresholds_origin": doc.thresholds_origin,
        "thresholds_sha256": doc.thresholds_sha256,
        "nodes": doc.nodes,
        "selection": encode_selection(doc.selection) if doc.selection is not None else None,
        "plan": encode_plan(doc.plan) if doc.plan is not None else None,
        "inventory": doc.inventory,
        "tests": (tests := [encode_test(t) for t in doc.tests.values()]),
        "timing": doc.timing(tests),
        **({"soak": doc.soak} if doc.soak else {}),
        **doc.extra,
    }


# ---------------------------------------------------------------------- the file


def write(path: Path, document: Any) -> None:
    """Write ``document`` to ``path`` so that a reader never sees half a file."""
    # One string, one write: json.dump writes every token separately.
    replace_whole(path, json.dumps(document, indent=1, sort_keys=False, default=str) + "\n")


def replace_whole(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` whole: written beside it under a hidden name that ends in
    random letters (no reader of ``*.json`` or ``*.prom`` takes it), then renamed over it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
        os.chmod(tmp, 0o644)  # mkstemp makes it private; a results or metrics file is for sharing
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def load(path: Path) -> dict[str, Any]:
    """Read a results file written by this plugin (for --gpucluster-baseline and the report), a
    version-1 file in version 2's words (``upgraded``); a file of another schema version, or not a
    results file at all, raises ValueError saying so."""
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: not a JSON results file ({exc}).") from None
    if not isinstance(document, dict) or "tests" not in document:
        raise ValueError(f"{path}: not a pytest-gpucluster results file (no 'tests' list).")
    version = document.get("schema_version")
    if version not in READS_VERSIONS:
        readable = " and ".join(map(str, READS_VERSIONS))
        raise ValueError(f"{path}: results schema_version {version!r}; this plugin reads versions {readable}.")
    return upgraded(document) if version == 1 else document


def upgraded(doc: dict[str, Any]) -> dict[str, Any]:
    """A version-1 document in version 2's words: each test's outcome as ``outcomes.decide`` says
    it (``skip`` → ``not_judged``; ``error`` → ``not_judged`` for the suite's own error, ``fault``
    for a fault outside the nodes, ``fail`` otherwise), its ``node`` from its parameter where that
    names a tested node, and the node × check matrix its recorded verdict lacks. The verdicts it
    recorded stand as recorded."""
    nodes = {str(n) for n in doc.get("nodes", [])}
    for t in doc.get("tests", []):
        old = str(t.get("verdict", ""))
        if t.get("cluster_fault"):
            t["verdict"] = "fault"
        elif old == "skip" or (old in ("fail", "error") and t.get("unjudged")):
            t["verdict"] = "not_judged"
        elif old == "error":
            t["verdict"] = "fail"
        t.setdefault("node", str(t.get("params", "")) if str(t.get("params", "")) in nodes else "")
        t.setdefault("findings", [])
    acceptance = doc.get("acceptance")
    if isinstance(acceptance, dict) and "matrix" not in acceptance:
        acceptance["matrix"] = encode_matrix(verdict.matrix(decode_run(doc)))
    doc["schema_version"] = SCHEMA_VERSION
    return doc


def with_verdicts(doc: dict[str, Any]) -> dict[str, Any]:
    """``doc`` with its verdicts: those it records, or, for a file whose run never reached its
    end (killed before it could record them), decided now from what it holds."""
    recorded = doc.get("acceptance")
    if not isinstance(recorded, dict) or not {"verdict", "nodes", "matrix"} <= set(recorded):
        doc["acceptance"] = {**(doc.get("acceptance") or {}), **encode_decided(verdict.decided(decode_run(doc)))}
    return doc


def load_node_verdicts(path: Path, option: str) -> dict[str, Any]:
    """An earlier results file to re-test from and merge with (``--gpucluster-merge-results``): the document,
    once it is known to hold per-node verdicts. ConfigError naming ``option`` otherwise."""
    try:
        document = load(path)
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{option}: {exc}") from None
    if not ((document.get("acceptance") or {}).get("nodes") or {}).get("verdicts"):
        raise ConfigError(
            f"{option}: the file holds no node verdicts to re-test or merge with "
            "(a run that ended before its verdict, or of an older plugin)."
        )
    return document

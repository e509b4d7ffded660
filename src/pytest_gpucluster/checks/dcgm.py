"""NVIDIA DCGM diagnostics, judged on the login node: the ``dcgmi diag -r LEVEL -j`` output a
node brought back (``workloads.dcgm.run_diag``), parsed and turned into findings.

The parser reads DCGM 3.x documents (everything under ``"DCGM GPU Diagnostic"``, tests grouped
into categories, one result per GPU with ``gpu_ids``/``gpu_id``, ``warnings`` as strings or as
``{"warning": ..., "error_id": ...}``) and the 4.x shape (``"DCGM Diagnostic"``, results by
``entity_id``, lower-case statuses). Pass and Skip are fine; Fail and Warn fail, each a finding
of its GPU (of the node for a test of all GPUs) with DCGM's own words.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pytest_gpucluster.verdict import Finding
from pytest_gpucluster.workloads.dcgm import DIAG_TIMEOUT_S, DiagRun

_OK = {"pass", "skip", "skipped", "not run"}


def job_minutes(level: int) -> int:
    """The job's time limit for one run level: the diagnostic's bound plus start-up margin."""
    return DIAG_TIMEOUT_S.get(level, DIAG_TIMEOUT_S[4]) // 60 + 5


@dataclass(frozen=True)
class DiagResult:
    """One test's result for one GPU (``gpu`` "all" for software tests that cover every GPU)."""

    category: str
    test: str
    gpu: str
    status: str  # normalised: pass, fail, warn, skip
    messages: tuple[str, ...]


def _document(text: str) -> dict[str, Any]:
    """The JSON object in dcgmi's output (it may print a line such as "Successfully ran
    diagnostic for group." before it)."""
    start, end = text.find("{"), text.rfind("}")
    if start < 0 or end < start:
        raise ValueError("no JSON object in dcgmi's output")
    doc = json.loads(text[start : end + 1])
    if not isinstance(doc, dict):
        raise ValueError("dcgmi's JSON is not an object")
    return doc


def _messages(result: Mapping[str, Any]) -> tuple[str, ...]:
    out: list[str] = []
    for key in ("warnings", "info"):
        value = result.get(key)
        items = value if isinstance(value, list) else ([value] if value else [])
        for item in items:
            if isinstance(item, dict):
                text = str(item.get("warning") or item.get("message") or item)
                code = item.get("error_id", item.get("error_code"))
                out.append(f"{text} (DCGM error {code})" if code is not None else text)
            else:
                out.append(str(item))
    return tuple(out)


def _gpu(result: Mapping[str, Any]) -> str:
    for key in ("gpu_id", "gpu_ids", "entity_id"):
        if key in result and result[key] not in (None, ""):
            value = str(result[key])
            return "all" if "," in value else value
    return "all"


def parse_diag(text: str) -> tuple[list[DiagResult], dict[str, Any]]:
    """Every per-GPU result in a ``dcgmi diag -j`` document, and its facts (DCGM version, driver).
    Raises ValueError when the text is not a DCGM diagnostic document."""
    doc = _document(text)
    body = doc.get("DCGM GPU Diagnostic") or doc.get("DCGM Diagnostic")
    if not isinstance(body, dict):
        raise ValueError("no 'DCGM GPU Diagnostic' (3.x) or 'DCGM Diagnostic' (4.x) object")
    meta: dict[str, Any] = doc["metadata"] if isinstance(doc.get("metadata"), dict) else body
    facts = {
        "version": meta.get("version", doc.get("version")),
        "driver": meta.get("Driver Version Detected", meta.get("driver_version")),
    }
    results: list[DiagResult] = []
    for category in body.get("test_categories", []):
        for test in category.get("tests", []):
            for result in test.get("results", []) or []:
                if not isinstance(result, dict):
                    continue  # json arrays indexed by GPU id leave nulls for GPUs not in the run
                status = str(result.get("status", "")).strip().lower()
                results.append(
                    DiagResult(
                        str(category.get("category", "?")),
                        str(test.get("name", "?")),
                        _gpu(result),
                        status,
                        _messages(result),
                    )
                )
    if not results:
        raise ValueError("the DCGM document holds no test results")
    return results, facts


def diag_findings(run: DiagRun) -> list[Finding]:
    """A failure for every Fail/Warn of one node's run, of the GPU it names (of the node for all
    GPUs) with DCGM's message; a run that timed out or produced no readable document is a
    failure of the node."""
    where = run.node
    if run.timed_out:
        text = (
            f"{where}: dcgmi diag -r {run.level} did not finish within its time limit "
            f"({run.seconds:.0f} s); the GPUs may be hung"
        )
        return [Finding.on_node(where, text)]
    try:
        results, _ = parse_diag(run.stdout)
    except ValueError as exc:
        tail = (run.stderr or run.stdout).strip().splitlines()[-3:]
        text = f"{where}: dcgmi diag -r {run.level} exited {run.returncode} without a readable result ({exc})"
        return [Finding.on_node(where, text + (": " + " | ".join(tail) if tail else ""))]
    found = []
    for r in results:
        if r.status in _OK:
            continue
        gpu = f"{where}:gpu{r.gpu}" if r.gpu != "all" else f"{where} (all GPUs)"
        words = "; ".join(r.messages) or "no message"
        text = f"{gpu}: DCGM {r.category} test '{r.test}' {r.status.upper()}: {words}"
        found.append(Finding.on_node(where, text, gpu=int(r.gpu) if r.gpu.isdigit() else None))
    return found

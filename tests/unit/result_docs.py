"""Results documents written by hand for the verdict and report tests: a measurement entry
(``measurement``), a finding (``finding``), a test record (``record_of_test``) and a whole
document (``document``), in the shapes ``results.ResultsDocument`` writes: every place a field."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pytest_gpucluster import verdict
from pytest_gpucluster.results import codec
from pytest_gpucluster.verdict import Finding
from pytest_gpucluster.verdict.finding import OUTSIDE_SCOPES


def measurement(
    metric: str,
    value: float,
    status: str,
    where: str,
    *,
    nodes: Sequence[str] | None = None,
    gpu: int | None = None,
    culprits: Sequence[str] | None = None,
    **threshold: Any,
) -> dict[str, Any]:
    """A judged measurement of ``nodes`` (one node: ``where`` is it; several: ``where`` joins them)."""
    unit = {"gpu.temperature": "C"}.get(metric, "GB/s")
    named = list(nodes) if nodes is not None else ([where] if where and "+" not in where else where.split("+"))
    named = [n for n in named if n]
    return {
        "kind": "measurement",
        "metric": metric,
        "value": value,
        "unit": unit,
        "where": where if gpu is None else f"{where}:gpu{gpu}",
        "detail": "",
        "nodes": named,
        "gpu": gpu,
        "culprits": list(culprits) if culprits is not None else (named if len(named) == 1 else []),
        "status": status,
        "sentence": f"{where if gpu is None else f'{where}:gpu{gpu}'}: {metric} = {value}",
        "threshold": threshold,
    }


def finding(
    text: str,
    *,
    node: str = "",
    nodes: Sequence[str] = (),
    culprits: Sequence[str] = (),
    gpu: int | None = None,
    port: str = "",
    scope: str = "",
    severity: str = "fail",
) -> dict[str, Any]:
    """A finding as the results hold it: of ``node`` (its GPU ``gpu``, its port ``port``), of
    ``nodes`` together with their ``culprits``, or of a ``scope`` outside the nodes."""
    if node:
        return codec.encode_finding(Finding.on_node(node, text, gpu=gpu, port=port, severity=severity))  # type: ignore[arg-type]
    if scope in OUTSIDE_SCOPES:
        return codec.encode_finding(Finding.outside(scope, text, nodes=nodes, severity=severity))  # type: ignore[arg-type]
    return codec.encode_finding(Finding.across(nodes, text, culprits=culprits, severity=severity))  # type: ignore[arg-type]


def record_of_test(
    nodeid: str,
    verdict: str,
    measurements: Sequence[dict[str, Any]] = (),
    node: str = "",
    message: str = "",
    area: str = "x",
    findings: Sequence[dict[str, Any]] = (),
    **extra: Any,
) -> dict[str, Any]:
    """A test's record; a measurement past its line stands for a finding, as the judge records it."""
    name = nodeid.split("::")[-1].split("[")[0]
    found = list(findings)
    for m in measurements:
        if m["status"] in ("warn", "fail"):
            nodes = m["nodes"]
            if len(nodes) == 1:
                found.append(finding(m["sentence"], node=nodes[0], gpu=m["gpu"], severity=m["status"]))
            else:
                found.append(finding(m["sentence"], nodes=nodes, culprits=m["culprits"], severity=m["status"]))
    return {
        "nodeid": nodeid,
        "node": node,
        "area": area,
        "name": name,
        "params": node,
        "verdict": verdict,
        "series": [],
        "measurements": list(measurements),
        "message": message,
        "findings": found,
        "problems": [f["text"] for f in found if f["severity"] == "fail"],
        "warnings": [],
        "unjudged": "",
        "cluster_fault": None,
        **extra,
    }


def document(tests, status="complete", nodes=("node1", "node2", "node10")) -> dict[str, Any]:
    return {"status": status, "nodes": list(nodes), "tests": tests, "environment": {}, "inventory": {}}


def handover(earlier: dict, earlier_ref: str, now: dict, now_ref: str) -> dict:
    """The handover of re-test ``now`` merged with ``earlier`` (two results documents), as the
    results record it."""
    merged = verdict.handover(
        codec.decode_nodes(earlier["acceptance"]["nodes"]),
        earlier_ref,
        codec.decode_nodes(now["acceptance"]["nodes"]),
        verdict.matrix(codec.decode_run(now)),
        now_ref,
        earlier_started=earlier.get("started"),
    )
    return codec.encode_handover(merged)

"""Results documents written by hand for the verdict and report tests: a measurement entry
(``measurement``), a test record (``record_of_test``) and a whole document (``document``), in the shapes
``results.ResultsDocument`` writes."""

from __future__ import annotations

from typing import Any


def measurement(metric: str, value: float, status: str, where: str, **threshold: Any) -> dict[str, Any]:
    unit = {"gpu.temperature": "C"}.get(metric, "GB/s")
    return {
        "kind": "measurement",
        "metric": metric,
        "value": value,
        "unit": unit,
        "where": where,
        "detail": "",
        "status": status,
        "sentence": f"{where}: {metric} = {value}",
        "threshold": threshold,
    }


def record_of_test(
    nodeid: str, verdict: str, measurements=(), params="", message="", area="x", problems=()
) -> dict[str, Any]:
    name = nodeid.split("::")[-1].split("[")[0]
    return {
        "nodeid": nodeid,
        "area": area,
        "name": name,
        "params": params,
        "verdict": verdict,
        "series": [],
        "measurements": list(measurements),
        "message": message,
        "problems": list(problems),
    }


def document(tests, status="complete", nodes=("node1", "node2", "node10")) -> dict[str, Any]:
    return {"status": status, "nodes": list(nodes), "tests": tests, "environment": {}, "inventory": {}}

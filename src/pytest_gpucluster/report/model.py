"""What the acceptance report shows, built from the results document and the verdicts
(``pytest_gpucluster.verdict``): readable thresholds and their sources, per-test summary cells,
the matrix's rows as shown, the versions and GPUs of the run, readable JUnit properties. Pure:
plain dicts in, frozen dataclasses and strings out; no pytest, no HTML. It decides nothing: every
verdict comes from ``verdict/``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pytest_gpucluster.config.gpu_specs import model_of, share, spec_of
from pytest_gpucluster.results.codec import PROPERTY, decode_verdict
from pytest_gpucluster.verdict.attribution import CLUSTER_ROW, Cell, Matrix
from pytest_gpucluster.verdict.findings import SEVERITY, measurement_label, worst
from pytest_gpucluster.verdict.measurement import Verdict
from pytest_gpucluster.verdict.ranges import hostlist


def _fmt(value: Any) -> str:
    if not isinstance(value, int | float):
        return str(value)
    v = float(value)
    if 1000 <= abs(v) < 1e7:
        return f"{v:.1f}"
    return f"{v:.4g}"


def line_of(m: Mapping[str, Any]) -> Verdict:
    """A recorded measurement as the typed verdict it was judged into (its ``Threshold`` with it):
    the report reads the line's bounds, origin and direction from it and works none of them out."""
    return decode_verdict(m)


def describe_threshold(m: Mapping[str, Any]) -> str:
    """A measurement's line in words (``Threshold.describe``): ``fail < 320 GB/s, warn < 340 GB/s``,
    and what an expected failure expects."""
    t = line_of(m).threshold
    return t.describe() + (f", expected to fail: {t.xfail}" if t.xfail else "")


SOURCE_LABELS = {
    "reference": "reference",
    "calibration": "calibration",
    "derived": "derived from the fabric",
    "site": "site's choice",
    "path": "path only, not a speed",  # a line that catches a zero (path_only in thresholds.toml)
    "missing": "missing from thresholds.toml",  # a measurement kept unjudged: no bound to judge it by
}


def threshold_origin(m: Mapping[str, Any]) -> str:
    """What a measurement's line rests on (``Verdict.origin``): ``reference``, ``calibration``,
    ``derived``, ``site``, ``path``, or ``missing`` for a measurement no line judged."""
    return line_of(m).origin


def threshold_source(m: Mapping[str, Any]) -> str:
    """The line's source in words: its kind, then the evidence and where the bound is set, e.g.
    ``calibration: calibrated from 3 run(s) ... (thresholds.toml [thresholds.calibrated-x.compute.memcopy])``."""
    verdict = line_of(m)
    label = SOURCE_LABELS[verdict.origin]
    evidence, where = verdict.threshold.evidence, verdict.threshold.source
    if evidence and where:
        return f"{label}: {evidence} ({where})"
    return f"{label}: {evidence or where}" if (evidence or where) else label


def measurement_value(m: Mapping[str, Any]) -> str:
    """``354.2 GB/s``."""
    return f"{_fmt(m.get('value'))} {m.get('unit', '')}".rstrip()


def junit_properties(entries: Sequence[Mapping[str, Any]]) -> list[tuple[str, str]]:
    """Readable JUnit XML properties for a test's data entries: one per measurement
    (``nccl.all_reduce.intra_node[node1]`` = ``354.2 GB/s pass (fail < 320 GB/s)``; a pass against
    a path line reads ``path proven (...)``), job and problem. Series, environment and inventory
    stay in the results file only."""
    props: list[tuple[str, str]] = []
    for e in entries:
        kind = e.get("kind")
        if kind == "measurement":
            bounds = describe_threshold(e)
            if line_of(e).proves_path:
                said = f"path proven ({bounds}, a path line, not a speed)"
            else:
                said = f"{e.get('status', '?')} ({bounds})"
            props.append((measurement_label(e), f"{measurement_value(e)} {said}"))
        elif kind == "job":
            props.append((f"{PROPERTY}.job", f"{e.get('job_id')} {e.get('name', '')} {e.get('folder', '')}".strip()))
        elif kind == "problem":
            props.append((f"{PROPERTY}.problem", str(e.get("text", ""))))
    return props


def junit_suite_properties(doc: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The run's verdict as JUnit XML test-suite properties, which every family allows: what a CI
    system reads beside the test counts."""
    acc = doc.get("acceptance") or {}
    nodes = acc.get("nodes") or {}
    return [
        (f"{PROPERTY}.verdict", str(acc.get("verdict", ""))),
        (f"{PROPERTY}.headline", str(acc.get("headline", ""))),
        (f"{PROPERTY}.profile", str(doc.get("profile", ""))),
        (f"{PROPERTY}.thresholds_sha256", str(doc.get("thresholds_sha256", ""))),
        (f"{PROPERTY}.nodes", str(nodes.get("summary", ""))),
        (f"{PROPERTY}.exclude", str(nodes.get("exclude", ""))),
    ]


@dataclass(frozen=True)
class TestCells:
    """The results-table cells of one test: its worst measurement stands for it."""

    measured: str
    threshold: str  # the bounds, then what they rest on in brackets
    verdict: str
    where: str
    jobs: str
    count: int


def badness(m: Mapping[str, Any]) -> tuple[int, float]:
    """Worse first: the verdict, then the value on the bad side of the metric. Every part of the
    page that picks one measurement of several (a test's row, a map's cell, a plot's point) picks
    by it, so each names the same worst GPU."""
    value = m.get("value")
    number = float(value) if isinstance(value, int | float) else 0.0
    better = line_of(m).threshold.better
    return SEVERITY.get(str(m.get("status")), 0), -number if better == "higher" else number


def test_cells(test: Mapping[str, Any], gpu: str) -> TestCells:
    """Cells for one test record: its headline measurement, the worst value of one metric (with
    how many values of it there were and, where the GPU model's datasheet states the figure, its
    share of it), its bounds, the test's verdict, where it was measured and the job ids. The
    metric is the one with the worst verdict; among equals, one with a unit of its own (TFLOP/s)
    before a ratio, so a GEMM check reads as its speed, not its spread."""
    ms = list(test.get("measurements", []))
    jobs = ", ".join(str(j) for j in test.get("job_ids", []))
    verdict = str(test.get("verdict", "?"))
    if not ms:
        return TestCells("", "", verdict, _node_param(test), jobs, 0)
    headline = max(ms, key=lambda m: (SEVERITY.get(str(m.get("status")), 0), str(m.get("unit")) != "ratio"))
    ms = [m for m in ms if m.get("metric") == headline.get("metric")]

    m = max(ms, key=badness)
    notes = [f"worst of {len(ms)}"] if len(ms) > 1 else []
    of_spec = share(m.get("value"), str(m.get("unit", "")), spec_of(gpu, str(m.get("metric", ""))))
    notes += [of_spec] if of_spec else []
    return TestCells(
        measured=measurement_value(m) + (f" ({'; '.join(notes)})" if notes else ""),
        threshold=f"{describe_threshold(m)} [{SOURCE_LABELS[threshold_origin(m)]}]",
        verdict=verdict,
        where=str(m.get("where", "")) or _node_param(test),
        jobs=jobs,
        count=len(ms),
    )


def _node_param(test: Mapping[str, Any]) -> str:
    return str(test.get("params", ""))


@dataclass(frozen=True)
class MatrixRow:
    """One row of the matrix as shown: one node, the cluster-wide row, or several nodes whose every
    check passed (or did not apply), named by their hostlist."""

    label: str
    nodes: tuple[str, ...]

    def cell(self, m: Matrix, column: tuple[str, str]) -> Cell:
        """The row's cell: the node's own, or for a group the worst of its nodes' cells, explained
        as the nodes that had each status (``pass on gpu-[01-60]``)."""
        if len(self.nodes) == 1:
            return m.cell(self.nodes[0], column)
        by_status: dict[str, list[str]] = {}
        for node in self.nodes:
            by_status.setdefault(m.cell(node, column).status, []).append(node)
        lines = tuple(f"{'not run' if s == 'none' else s} on {hostlist(ns)}" for s, ns in by_status.items())
        return Cell(worst(by_status), lines)


def matrix_rows(m: Matrix, max_node_rows: int = 16) -> tuple[MatrixRow, ...]:
    """The rows to show: up to ``max_node_rows`` nodes, a row per node in the matrix's order. Past
    that, the nodes with a failure first, then those not judged, with a warning or an expected failure,
    each in a row of its own, and the nodes where every check passed or did not apply in one row
    named by their hostlist; the cluster-wide row last."""
    nodes = [r for r in m.rows if r != CLUSTER_ROW]
    tail = (MatrixRow(CLUSTER_ROW, (CLUSTER_ROW,)),) if CLUSTER_ROW in m.rows else ()
    if len(nodes) <= max_node_rows:
        return tuple(MatrixRow(n, (n,)) for n in nodes) + tail
    rank = {"fail": 0, "xpass": 0, "not_judged": 1, "fault": 1, "interrupted": 1, "warn": 2, "xfail": 3}
    row_status = {n: worst(m.cell(n, c).status for c in m.columns) for n in nodes}
    marked = sorted((n for n in nodes if row_status[n] in rank), key=lambda n: rank[row_status[n]])
    clean = tuple(n for n in nodes if row_status[n] not in rank)
    if len(clean) > 1:
        group: tuple[MatrixRow, ...] = (MatrixRow(f"{hostlist(clean)} ({len(clean)} nodes)", clean),)
    else:
        group = tuple(MatrixRow(n, (n,)) for n in clean)
    return tuple(MatrixRow(n, (n,)) for n in marked) + group + tail


# Display name → keys other checks may record the fact under (first present wins).
VERSION_FACTS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("pytest-gpucluster", ("plugin",)),
    ("Python", ("python",)),
    ("PyTorch", ("torch",)),
    ("NCCL", ("nccl", "nccl_version", "torch_nccl")),
    ("CUDA", ("cuda", "cuda_version", "torch_cuda")),
    ("NVIDIA driver", ("driver", "driver_version", "nvidia_driver")),
    ("Slurm", ("slurm", "slurm_version")),
    ("submitit", ("submitit",)),
    ("pytest", ("pytest",)),
)


def node_facts(doc: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """What the nodes said of themselves: each inventory's compared facts (kept under "summary",
    workloads/inventory.py), else each soaked GPU's start record (its device, driver and CUDA)."""
    inventory = doc.get("inventory") or {}
    facts: list[Mapping[str, Any]] = [f.get("summary", f) for f in inventory.values() if isinstance(f, Mapping)]
    if facts:
        return facts
    soaked = ((doc.get("soak") or {}).get("nodes") or {}).values()
    return [
        g for n in soaked if isinstance(n, Mapping) for g in (n.get("gpus") or {}).values() if isinstance(g, Mapping)
    ]


def versions(doc: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The software versions a customer asks about, in a fixed order; "not recorded" where no
    check recorded the fact (from the environment, else the same fact found in every node's
    inventory, else the distinct values across nodes)."""
    env = doc.get("environment", {})
    nodes = node_facts(doc)
    out = []
    for label, keys in VERSION_FACTS:
        value: Any = next((env[k] for k in keys if env.get(k) not in (None, "")), None)
        if value is None:
            seen = sorted(
                {
                    str(facts[k])
                    for facts in nodes
                    if isinstance(facts, Mapping)
                    for k in keys
                    if facts.get(k) not in (None, "", "n/a")
                }
            )
            value = " / ".join(seen) if seen else None
        out.append((label, "not recorded" if value is None else str(value)))
    return out


def gpu_summary(doc: Mapping[str, Any]) -> str:
    """``2 nodes × 8 NVIDIA H100 80GB HBM3 = 16 GPUs``; where the caller's CUDA_VISIBLE_DEVICES
    chose a local run's GPUs, that too (``...; CUDA_VISIBLE_DEVICES=0,1,2: 3 of 4 GPUs``)."""
    cluster = doc.get("cluster", {})
    nodes = len(doc.get("nodes", [])) or int(cluster.get("nodes_expected", 0) or 0)
    per_node = int(cluster.get("gpus_per_node", 0) or 0)
    declared = str(cluster.get("gpu_model") or "")
    model = gpu_model(doc) or "GPU"
    noun = "node" if nodes == 1 else "nodes"
    chosen = (doc.get("environment") or {}).get("cuda_visible_devices")
    also = f"; {chosen}" if chosen else ""
    # The model the GPUs gave is the one named; a profile that declared another says so beside it.
    if declared and declared.lower() not in model.lower():
        also = f" (the profile declares {declared}){also}"
    if not per_node:
        return f"{nodes} {noun}, no GPU devices ({model}){also}"
    gpus = nodes * per_node
    return f"{nodes} {noun} × {per_node} {model} = {gpus} GPU{'' if gpus == 1 else 's'}{also}"


def gpu_model(doc: Mapping[str, Any]) -> str:
    """The run's GPU model by NVML's name (the one every inventoried GPU gives), else the
    profile's ``gpu_model``: what the datasheet figures are looked up by."""
    inventory = doc.get("inventory") or {}
    names = [
        str(g.get("name", ""))
        for facts in inventory.values()
        if isinstance(facts, Mapping)
        for g in facts.get("gpus") or []
        if isinstance(g, Mapping)
    ]
    if not names:  # a soak run on its own: the device its GPUs gave ("cpu" for a stand-in rank)
        names = [str(f.get("device", "")) for f in node_facts(doc) if f.get("device") not in (None, "cpu")]
    return model_of(names, str((doc.get("cluster") or {}).get("gpu_model") or ""))

"""nvbandwidth, judged on the login node: the output a node brought back
(``workloads.nvbandwidth.run_nvbandwidth``) parsed into its bandwidth matrices and turned into
per-GPU measurements.

Both of nvbandwidth's outputs are read: the ``--json`` document (0.5 and later: one object
``"nvbandwidth"`` with ``testcases``, each a ``name``, a ``status``, a ``bandwidth_description``
and a ``bandwidth_matrix`` of strings, ``"N/A"`` where there is no value) and the text it prints
otherwise (``Running <testcase>.``, the description line, a header of column indices, one row per
source, ``SUM <testcase> <total>``). Host↔device matrices have a CPU row and a column per GPU; the
device↔device matrix a row and a column per GPU, its diagonal empty (``N/A``, or ``0.00`` in
versions before 0.5).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pytest_gpucluster.verdict import Finding, Measurement
from pytest_gpucluster.workloads.nvbandwidth import TESTCASES, NvbandwidthRun

H2D, D2H, D2D = TESTCASES
METRICS = {
    H2D: "nvbandwidth.host_to_device",
    D2H: "nvbandwidth.device_to_host",
    D2D: "nvbandwidth.device_to_device",
}
_RUNNING = re.compile(r"^Running (\S+?)\.?$")
_ARROW = re.compile(r"\((?:row|column)\)\s*(<->|<-|->)\s*\w+\((?:row|column)\)")


@dataclass(frozen=True)
class Matrix:
    """One testcase's result: rows of GB/s (None where nvbandwidth printed N/A)."""

    testcase: str
    description: str = ""
    rows: tuple[tuple[float | None, ...], ...] = ()
    status: str = "Passed"
    error: str = ""

    @property
    def arrow(self) -> str:
        """The direction the description gives (``->`` row to column, ``<-`` row from column)."""
        found = _ARROW.search(self.description)
        return found.group(1) if found else "->"


def _cell(text: Any) -> float | None:
    try:
        value = float(str(text))
    except ValueError:
        return None  # "N/A"
    return value if math.isfinite(value) else None


def parse_json(text: str) -> tuple[dict[str, Matrix], dict[str, str]]:
    """The testcases of an ``nvbandwidth -j`` document and its facts (version, driver, and the
    run's own error if it stopped). Raises ValueError when the text holds no such document."""
    start, end = text.find("{"), text.rfind("}")
    if start < 0 or end < start:
        raise ValueError("no JSON object in nvbandwidth's output")
    doc = json.loads(text[start : end + 1])
    body = doc.get("nvbandwidth") if isinstance(doc, dict) else None
    if not isinstance(body, dict):
        raise ValueError("no 'nvbandwidth' object in the JSON document")
    facts = {
        key: str(body[name])
        for key, name in (("version", "version"), ("driver", "Driver Version"), ("error", "error"))
        if body.get(name) not in (None, "")
    }
    out: dict[str, Matrix] = {}
    for case in body.get("testcases", []) or []:
        if not isinstance(case, dict) or not case.get("name"):
            continue
        rows = tuple(tuple(_cell(c) for c in row) for row in case.get("bandwidth_matrix", []) or [])
        out[str(case["name"])] = Matrix(
            testcase=str(case["name"]),
            description=str(case.get("bandwidth_description", "")),
            rows=rows,
            status=str(case.get("status", "")),
            error=str(case.get("error", "")),
        )
    return out, facts


def parse_text(text: str) -> tuple[dict[str, Matrix], dict[str, str]]:
    """The testcases nvbandwidth printed as text, and its facts (version, driver)."""
    facts: dict[str, str] = {}
    out: dict[str, Matrix] = {}
    name = description = ""
    rows: list[tuple[float | None, ...]] = []
    notes: list[str] = []

    def close() -> None:
        if name:
            status = "Passed" if rows else (notes[0].split(":", 1)[0] if notes else "no matrix")
            out[name] = Matrix(name, description, tuple(rows), status, "; ".join(notes))

    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith("nvbandwidth Version:"):
            facts["version"] = line.split(":", 1)[1].strip()
        elif line.startswith("Driver Version:"):
            facts["driver"] = line.split(":", 1)[1].strip()
        elif m := _RUNNING.match(line):
            close()
            name, description, rows, notes = m.group(1), "", [], []
        elif not name or not line or line.startswith("SUM "):
            continue
        elif "bandwidth" in line and "(" in line:
            description = line
        elif description and line.split()[0].isdigit():
            cells = line.split()
            if all(c.isdigit() for c in cells) and not rows:
                continue  # the header of column indices
            rows.append(tuple(_cell(c) for c in cells[1:]))
        elif not description:
            notes.append(line)  # "Waived: ...", an error nvbandwidth printed instead of a matrix
    close()
    return out, facts


def parse(run: NvbandwidthRun) -> tuple[dict[str, Matrix], dict[str, str]]:
    """Whichever output the run asked for."""
    return parse_json(run.stdout) if run.json_output else parse_text(run.stdout)


@dataclass(frozen=True)
class Unread:
    """What kept a reading from being taken on a node: a failure of the node, and the testcase it
    is about (None: the whole run)."""

    finding: Finding
    testcase: str | None = None


@dataclass(frozen=True)
class NodeCopies:
    """One node's judged readings: GB/s per GPU for each direction; for device↔device each GPU's
    worst pair (value, the pair as ``gpuA <- gpuB``)."""

    node: str
    gpus: int
    host_to_device: dict[int, float] = field(default_factory=dict)
    device_to_host: dict[int, float] = field(default_factory=dict)
    device_to_device: dict[int, tuple[float, str]] = field(default_factory=dict)
    problems: tuple[Unread, ...] = ()
    facts: Mapping[str, str] = field(default_factory=dict)

    def unread(self, *testcases: str) -> list[Finding]:
        """The failures that kept ``testcases`` (or the whole run) from being read."""
        return [u.finding for u in self.problems if u.testcase is None or u.testcase in testcases]


def per_gpu(matrix: Matrix) -> dict[int, float]:
    """Host↔device: the lowest value in each GPU's column (one CPU row in practice)."""
    out: dict[int, float] = {}
    for row in matrix.rows:
        for gpu, value in enumerate(row):
            if value is not None:
                out[gpu] = min(value, out.get(gpu, value))
    return out


def worst_pairs(matrix: Matrix) -> dict[int, tuple[float, str]]:
    """Device↔device: for each GPU, the lowest value of every pair it is in, with both GPUs
    named in nvbandwidth's direction. The diagonal is no pair."""
    out: dict[int, tuple[float, str]] = {}
    for a, row in enumerate(matrix.rows):
        for b, value in enumerate(row):
            if a == b or value is None:
                continue
            pair = f"gpu{a} {matrix.arrow} gpu{b}"
            for gpu in (a, b):
                if gpu not in out or value < out[gpu][0]:
                    out[gpu] = (value, pair)
    return out


def _tail(run: NvbandwidthRun) -> str:
    lines = (run.stderr or run.stdout).strip().splitlines()[-3:]
    return " | ".join(line.strip() for line in lines) or "no output"


def node_copies(run: NvbandwidthRun) -> NodeCopies:
    """The node's readings, and a failure of the node for everything that kept one from being
    read: a run past its timeout, an exit without a readable result, a testcase that did not pass."""
    where = run.node

    def unread(text: str, testcase: str | None = None) -> Unread:
        return Unread(Finding.on_node(where, text), testcase)

    if run.timed_out:
        text = (
            f"{where}: nvbandwidth did not finish within its timeout of {run.timeout_s:g} s "
            f"({' '.join(run.argv)}); the GPUs or their links may be hung"
        )
        return NodeCopies(where, 0, problems=(unread(text),))
    try:
        cases, facts = parse(run)
    except ValueError as exc:
        text = f"{where}: nvbandwidth exited {run.returncode} without a readable result ({exc})"
        return NodeCopies(where, 0, problems=(unread(text),))
    problems: list[Unread] = []
    if "error" in facts:
        problems.append(unread(f"{where}: nvbandwidth reported an error: {facts['error']}"))
    found: dict[str, Matrix] = {}
    for name in TESTCASES:
        case = cases.get(name)
        if case is None:
            text = f"{where}: nvbandwidth gave no result for {name} (exit {run.returncode}: {_tail(run)})"
            problems.append(unread(text, name))
        elif case.status.lower() != "passed" or not case.rows:
            # A node of one GPU has no pair: nvbandwidth waives the device-to-device testcase.
            if not (name == D2D and case.status.lower() == "waived"):
                why = case.error or case.status or "no matrix"
                problems.append(unread(f"{where}: nvbandwidth {name} did not pass: {why}", name))
        else:
            found[name] = case
    h2d = per_gpu(found[H2D]) if H2D in found else {}
    d2h = per_gpu(found[D2H]) if D2H in found else {}
    d2d = worst_pairs(found[D2D]) if D2D in found else {}
    gpus = max((len(r) for m in found.values() for r in m.rows), default=0)
    return NodeCopies(where, gpus, h2d, d2h, d2d, tuple(problems), facts)


def host_device_measurements(copies: NodeCopies, job_id: str | None = None) -> list[Measurement]:
    """Host→device and device→host GB/s, one measurement of each GPU per direction."""
    return [
        Measurement.at(METRICS[testcase], value, "GB/s", copies.node, gpu=gpu, detail=testcase, job_id=job_id)
        for testcase, values in ((H2D, copies.host_to_device), (D2H, copies.device_to_host))
        for gpu, value in sorted(values.items())
    ]


def device_to_device_measurements(copies: NodeCopies, job_id: str | None = None) -> list[Measurement]:
    """Device↔device GB/s: one measurement of each GPU, its worst pair named with both GPUs."""
    return [
        Measurement.at(
            METRICS[D2D], value, "GB/s", copies.node, gpu=gpu, detail=f"{D2D}, worst pair {pair}", job_id=job_id
        )
        for gpu, (value, pair) in sorted(copies.device_to_device.items())
    ]

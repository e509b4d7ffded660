"""The machine-readable results file: one JSON document, rewritten atomically after every test so
an interrupted run keeps everything it measured.

Schema (``schema_version`` 1)::

    {"schema_version": 1, "status": "running" | "complete" | "interrupted",
     "profile": str, "started": iso8601, "finished": iso8601 | null,
     "environment": {name: value}, "thresholds_file": str, "thresholds_sha256": str,
     "nodes": [str], "inventory": {node: {...}},
     "tests": [{"nodeid", "outcome", "duration_s", "job_ids", "measurements": [...],
                "series": [...], "message", "verdict"}]}
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SCHEMA_VERSION = 1


def now_iso() -> str:
    """The current time, UTC, ISO 8601, seconds."""
    return _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")


def atomic_write_json(path: Path, document: Any) -> None:
    """Write ``document`` to ``path`` so that a reader never sees half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            json.dump(document, out, indent=1, sort_keys=False, default=str)
            out.write("\n")
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


@dataclass
class TestRecord:
    """What one test did, assembled from its setup/call/teardown reports."""

    nodeid: str
    outcome: str = "unknown"
    duration_s: float = 0.0
    message: str = ""
    job_ids: list[str] = field(default_factory=list)
    measurements: list[dict[str, Any]] = field(default_factory=list)
    series: list[dict[str, Any]] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def verdict(self) -> str:
        """pass / warn / fail / skip / xfail / error, warn when any judged measurement warned."""
        if self.outcome == "passed":
            return "warn" if any(m.get("status") == "warn" for m in self.measurements) else "pass"
        return {"failed": "fail", "skipped": "skip", "xfailed": "xfail", "error": "error"}.get(
            self.outcome, self.outcome
        )

    def to_json(self) -> dict[str, Any]:
        """Plain dict in schema order."""
        return {
            "nodeid": self.nodeid,
            "outcome": self.outcome,
            "verdict": self.verdict,
            "duration_s": round(self.duration_s, 3),
            "job_ids": self.job_ids,
            "message": self.message,
            "measurements": self.measurements,
            "series": self.series,
            **self.extra,
        }


@dataclass
class ResultsDocument:
    """The whole results file, held in memory by the controlling process."""

    profile: str
    thresholds_file: str = ""
    thresholds_sha256: str = ""
    environment: dict[str, Any] = field(default_factory=dict)
    nodes: list[str] = field(default_factory=list)
    inventory: dict[str, Any] = field(default_factory=dict)
    started: str = field(default_factory=now_iso)
    finished: str | None = None
    status: str = "running"
    tests: dict[str, TestRecord] = field(default_factory=dict)

    def record(self, nodeid: str) -> TestRecord:
        """The record for ``nodeid``, created on first use."""
        if nodeid not in self.tests:
            self.tests[nodeid] = TestRecord(nodeid)
        return self.tests[nodeid]

    def to_json(self) -> dict[str, Any]:
        """The document as written to disk."""
        return {
            "schema_version": SCHEMA_VERSION,
            "status": self.status,
            "profile": self.profile,
            "started": self.started,
            "finished": self.finished,
            "environment": self.environment,
            "thresholds_file": self.thresholds_file,
            "thresholds_sha256": self.thresholds_sha256,
            "nodes": self.nodes,
            "inventory": self.inventory,
            "tests": [t.to_json() for t in self.tests.values()],
        }

    def write(self, path: Path) -> None:
        """Rewrite ``path`` atomically."""
        atomic_write_json(path, self.to_json())


def load_results(path: Path) -> dict[str, Any]:
    """Read a results file written by this plugin (for --baseline and the report)."""
    document: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return document

"""The nodes a run lost under its jobs, each with the first evidence: one record per run, which
the launcher reads (no job on a lost node), its jobs' waits extend, and the tested nodes
(``run.nodes``) and the session read."""

from __future__ import annotations

import datetime as _dt
import threading
from collections.abc import Mapping


class LostNodes:
    """Node → why it was lost, and how this run learned it (``{"why", "when" (UTC), "job",
    "how"}``). The first evidence is kept; later sightings do not overwrite it. Thread-safe: jobs
    are waited on from several threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._why: dict[str, str] = {}
        self._seen: dict[str, dict[str, str]] = {}

    def learn(self, lost: Mapping[str, str], *, job_id: str, how: str) -> None:
        """Remember nodes this run lost, once each: later jobs are planned without them and the
        checks they would have had fail with this first evidence."""
        when = _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")
        with self._lock:
            for node, why in lost.items():
                self._why.setdefault(node, why)
                self._seen.setdefault(node, {"why": why, "when": when, "job": job_id, "how": how})

    @property
    def nodes(self) -> dict[str, str]:
        """Every node lost so far: name → Slurm's state and reason, or what this run saw."""
        with self._lock:
            return dict(self._why)

    @property
    def seen(self) -> dict[str, dict[str, str]]:
        """How this run learned it lost each node: name → ``{"why", "when", "job", "how"}``."""
        with self._lock:
            return {n: dict(s) for n, s in self._seen.items()}

    def __contains__(self, node: object) -> bool:
        with self._lock:
            return node in self._why

    def __bool__(self) -> bool:
        with self._lock:
            return bool(self._why)

    def evidence(self, node: str) -> str:
        """How this run learned it lost ``node``: what was seen, how and when; "lost" when never."""
        with self._lock:
            seen = self._seen.get(node)
            why = self._why.get(node, "lost")
        return f"{seen['why']} (seen {seen['how']}, {seen['when']})" if seen else why

"""What one check's record says, in the words every verdict uses: its label, the sentences of
its failures (the culprit first), a fold of repeated sentences (``FailureLine``), and how severe each
status is when several meet."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pytest_gpucluster.outcomes import first_line
from pytest_gpucluster.verdict.check import CheckResult
from pytest_gpucluster.verdict.fold import fold

# Worst first wins when several results meet (a matrix cell, a test's measurements).
SEVERITY = {
    "fail": 8,
    "xpass": 7,
    "fault": 6,
    "not_judged": 5,
    "interrupted": 5,
    "warn": 4,
    "xfail": 3,
    "pass": 2,
    "n/a": 1,
    "none": 0,
}


def worst(statuses: Iterable[str]) -> str:
    """The most severe of ``statuses`` ("none" when empty)."""
    return max(statuses, key=lambda s: SEVERITY.get(s, 0), default="none")


def measurement_label(m: Mapping[str, Any]) -> str:
    """``nccl.all_reduce.intra_node[node1]`` (plus `` detail`` when there is one)."""
    label = str(m.get("metric", "?"))
    if m.get("where"):
        label += f"[{m['where']}]"
    if m.get("detail"):
        label += f" {m['detail']}"
    return label


@dataclass(frozen=True)
class FailureLine:
    """One line of the failures: what one check found, repeated sentences folded (``verdict/fold.py``),
    the check's label after it; ``nodeid`` is the check, for a link to its details."""

    text: str
    count: int
    nodeid: str

    @property
    def line(self) -> str:
        """The text, with ``(×N)`` after it when it stands for more than one sentence."""
        return self.text if self.count == 1 else f"{self.text} (×{self.count})"


def test_label(nodeid: str) -> str:
    """``tests/acceptance/test_nccl.py::test_x[node1]`` → ``test_nccl.py::test_x[node1]``."""
    path, sep, rest = str(nodeid).partition("::")
    return f"{path.rsplit('/', 1)[-1]}{sep}{rest}"


def failure_sentences(test: CheckResult) -> list[str]:
    """What a failed check found, one sentence each, the culprit (node, GPU, port, job) first:
    the texts of its failing findings (its failed measurements among them); else its message's
    first line."""
    found = [f for f in dict.fromkeys(f.text for f in test.findings_of("fail")) if f]
    return found or [first_line(test.message) or test.verdict]


def failure_lines(test: CheckResult, nodes: Sequence[str] = ()) -> list[FailureLine]:
    """A failed check's sentences folded (one line per node and cause), its label after each."""
    label = test_label(test.nodeid)
    return [FailureLine(f"{f.text} ({label})", f.count, test.nodeid) for f in fold(failure_sentences(test), nodes)]

"""One check's result as typed fields (``CheckResult``), and the run's results as the verdicts read
them (``RunRecord``). The results side builds a ``CheckResult`` once, at the test's last phase,
with its outcome decided there (``outcomes.decide``); every verdict of ``verdict/`` reads these
fields and nothing else. ``results/codec.py`` reads the same fields back from a results file, so a
file written by an earlier run is judged by the same code as a run in progress.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_gpucluster.outcomes import Outcome
from pytest_gpucluster.verdict.finding import Finding
from pytest_gpucluster.verdict.measurement import Verdict

Column = tuple[str, str]


def split_nodeid(nodeid: str) -> tuple[str, str, str]:
    """``tests/acceptance/test_nccl.py::test_x[node1]`` → (area ``nccl``, ``test_x``, ``node1``)."""
    path, _, rest = nodeid.partition("::")
    stem = Path(path).stem
    area = stem[5:] if stem.startswith("test_") else stem
    func = rest.split("::")[-1] if rest else stem
    match = re.match(r"^([^\[]*)(?:\[(.*)\])?$", func, re.DOTALL)
    name, params = (match.group(1), match.group(2) or "") if match else (func, "")
    return area or "tests", name, params


@dataclass(frozen=True)
class Stopped:
    """A fault outside the nodes that stopped a check (``launch/faults.py``): what it was and its sentence."""

    what: str
    sentence: str

    @property
    def said(self) -> str:
        return self.sentence or self.what


@dataclass(frozen=True)
class CheckResult:
    """What one check ended in: its outcome (decided once), the verdicts of its measurements, its
    findings, the warnings it raised, the fault outside the nodes that stopped it, why it did not
    apply, and its jobs. ``outcome`` is pytest's word for the test (``passed``, ``failed``,
    ``skipped``, ``error``, ...), ``verdict`` the check's (``outcomes.Outcome``)."""

    nodeid: str
    verdict: Outcome
    node: str = ""  # the node a per-node check tests
    outcome: str = "unknown"
    message: str = ""
    verdicts: tuple[Verdict, ...] = ()
    findings: tuple[Finding, ...] = ()
    warnings: tuple[str, ...] = ()
    unjudged: str = ""  # the exception of an error that is no judgement
    stopped: Stopped | None = None
    not_applicable: str = ""  # why it does not apply; "" for a check that applies
    job_ids: tuple[str, ...] = ()

    @property
    def column(self) -> Column:
        """Its matrix column: the area and the test function's name."""
        area, name, _ = split_nodeid(self.nodeid)
        return area, name

    @property
    def label(self) -> str:
        """The test function with its parameters: ``test_x[node1]``."""
        return self.nodeid.split("::")[-1]

    def of_status(self, status: str) -> tuple[Verdict, ...]:
        """Its measurements' verdicts of ``status`` (``unjudged``: measured with no bound)."""
        return tuple(v for v in self.verdicts if v.status == status)

    def findings_of(self, severity: str) -> tuple[Finding, ...]:
        return tuple(f for f in self.findings if f.severity == severity)


@dataclass(frozen=True)
class RunRecord:
    """The run as its verdicts read it: the checks' results, the tested nodes and those the
    inventory saw, the nodes lost, excluded and held, the selection and whether the run ended."""

    tests: tuple[CheckResult, ...]
    nodes: tuple[str, ...] = ()
    inventory: tuple[str, ...] = ()  # the nodes the inventory describes
    lost: Mapping[str, Any] = field(default_factory=dict)  # node → how it was lost (``why``, when, where)
    excluded: Mapping[str, str] = field(default_factory=dict)  # node → Slurm's state, left out before any job
    selection: Mapping[str, Any] | None = None  # the selection as the results hold it (``codec.encode_selection``)
    status: str = "complete"

    @property
    def partial(self) -> bool:
        """Whether the selection left required checks out."""
        return bool((self.selection or {}).get("partial"))

"""Verdicts: what the run's measurements and records decide, as plain data and sentences. Pure: no
pytest, no Slurm, no launcher; the report renders these, the session acts on them.

* ``check``: one check's result as typed fields, and the run's results as the verdicts read them;
* ``finding``: one thing a check found, as data: its scope, the nodes it names, the culprits;
* ``measurement``: one measurement × its threshold → pass / warn / fail / xfail and one sentence;
* ``findings``: a check's label, the sentences of its failures, the severity of statuses;
* ``attribution``: every test's result put on the nodes its fields name (the node × check matrix);
* ``run``: the run's acceptance verdict (ACCEPTED, REJECTED, INCOMPLETE, PARTIAL) and its reasons,
  faults outside the nodes among them;
* ``nodes``: each tested node's verdict and the hostlist of those rejected;
* ``merge``: a re-test merged into an earlier run's results (``--gpucluster-merge-results``);
* ``decided``: all of them decided once from the run's typed results, as the results record them;
* ``exit``: the run's exit status from pytest's and the verdicts.
"""

from __future__ import annotations

from pytest_gpucluster.outcomes import first_line
from pytest_gpucluster.verdict.attribution import CLUSTER_ROW, Matrix, matrix, placements
from pytest_gpucluster.verdict.check import CheckResult, RunRecord, Stopped
from pytest_gpucluster.verdict.decided import Recorded, decided
from pytest_gpucluster.verdict.exit import EXIT_INCOMPLETE, exit_status
from pytest_gpucluster.verdict.finding import Finding, Scope, Severity
from pytest_gpucluster.verdict.findings import FailureLine
from pytest_gpucluster.verdict.measurement import Measurement, Status, Verdict, judge
from pytest_gpucluster.verdict.merge import handover
from pytest_gpucluster.verdict.nodes import Nodes, NodeVerdict, node_verdicts
from pytest_gpucluster.verdict.ranges import hostlist
from pytest_gpucluster.verdict.run import Acceptance, Overall, acceptance, stopped_by_faults_only

__all__ = [
    "CLUSTER_ROW",
    "EXIT_INCOMPLETE",
    "Acceptance",
    "CheckResult",
    "FailureLine",
    "Finding",
    "Matrix",
    "Measurement",
    "NodeVerdict",
    "Nodes",
    "Overall",
    "Recorded",
    "RunRecord",
    "Scope",
    "Severity",
    "Status",
    "Stopped",
    "Verdict",
    "acceptance",
    "decided",
    "exit_status",
    "first_line",
    "handover",
    "hostlist",
    "judge",
    "matrix",
    "node_verdicts",
    "placements",
    "stopped_by_faults_only",
]

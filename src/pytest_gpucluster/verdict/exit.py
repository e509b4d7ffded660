"""The run's exit status, decided from pytest's own status and the run's verdicts.

A CI gate reads the exit status alone, so each verdict has its own code:

* 0   ACCEPTED or PARTIAL (what ran passed);
* 1   REJECTED: a check failed on the cluster; also a harness error (pytest's own status is kept);
* 10  INCOMPLETE: the acceptance is not whole (a required check skipped, not reached, or stopped
  by a fault outside the nodes), neither a pass nor a rejection of any node;
* pytest's other codes stand as they are: 2 interrupted, 3 internal error, 4 usage error (a bad
  option or file, raised before any job), 5 no tests collected.

With ``--gpucluster-merge-results`` the operator asked for the cluster's handover: the handover verdict
decides 0, 1 or 10 in place of this run's alone.
"""

from __future__ import annotations

# pytest.ExitCode's values: this package does not import pytest.
OK = 0
TESTS_FAILED = 1
EXIT_INCOMPLETE = 10  # clear of pytest's own codes (0-6)

BY_VERDICT = {"ACCEPTED": OK, "PARTIAL": OK, "REJECTED": TESTS_FAILED}


def exit_status(
    verdict: str,
    pytest_status: int | None = None,
    *,
    faults_only: bool = False,
    handover: str | None = None,
) -> int:
    """The exit status of a run whose acceptance verdict is ``verdict``.

    ``pytest_status`` is what pytest would exit with; None for a results file read on its own
    (``python -m pytest_gpucluster.report``), where the verdict alone decides. An INCOMPLETE run
    exits 10 where pytest says OK, or says TESTS_FAILED only because checks were stopped by a
    fault outside the nodes (``faults_only``); a harness error keeps pytest's 1. ``handover``, the
    verdict of ``--gpucluster-merge-results``, decides in place of the run's own verdict where pytest's status
    is 0, 1 or 10."""
    if pytest_status is None:
        return BY_VERDICT.get(verdict, EXIT_INCOMPLETE)
    status = pytest_status
    if verdict == "INCOMPLETE" and (status == OK or (status == TESTS_FAILED and faults_only)):
        status = EXIT_INCOMPLETE
    if handover is not None and status in (OK, TESTS_FAILED, EXIT_INCOMPLETE):
        status = {"ACCEPTED": OK, "REJECTED": TESTS_FAILED}.get(handover, EXIT_INCOMPLETE)
    return status

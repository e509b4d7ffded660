"""The headline command on the project's 2-node Slurm cluster: ``-m multinode`` is the whole
handover acceptance, with a short soak after the one-shot checks, and gives its verdict; a
narrower selection says PARTIAL. The whole handover runs once per self-test: as an unprivileged
operator inside a maintenance reservation beside another operator's run (test_operators_ci.py),
or here as root where the operators cannot run from this checkout."""

from __future__ import annotations

from pathlib import Path

import pytest
from handover_support import HANDOVER, assert_whole_handover

from gpucluster_testcluster.operators import Operator, unreachable

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
# Another user than root, as the operators of test_operators_ci.py are: what it may enter is what
# the folders allow to others.
OTHERS = Operator("others", 65534, 65534, Path("/nonexistent"))


def test_multinode_runs_the_whole_acceptance_and_gives_the_handover_verdict(run_acceptance):
    if not (why := unreachable(OTHERS, REPO)):
        pytest.skip("the whole handover runs as operator gcop2 in test_operators_ci.py (they may run this checkout)")
    print(f"as root: {why}")
    run = run_acceptance(*HANDOVER)
    assert_whole_handover(run.returncode, run.output, run.results, "ci")


def test_a_narrower_selection_is_partial(run_acceptance):
    run = run_acceptance("tests/acceptance", "-m", "quick")
    acc = run.results["acceptance"]
    assert run.returncode == 0, run.output
    assert acc["verdict"] == "PARTIAL", acc
    assert acc["headline"].startswith("PARTIAL: ") and "required checks not selected" in acc["headline"]
    assert "gpucluster: PARTIAL: " in run.output

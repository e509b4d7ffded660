"""NVIDIA DCGM diagnostics where DCGM is installed: ``dcgmi diag -r <profile.dcgm_level>`` on every
node, every Fail or Warn named with the GPU and DCGM's own message. Not applicable on nodes without
dcgmi unless the profile requires DCGM (``dcgm_required = true``): then such a node fails.
"""

from __future__ import annotations

import pytest

from pytest_gpucluster.checks import dcgm as dcgm_checks
from pytest_gpucluster.outcomes import not_applicable
from pytest_gpucluster.plan import jobs

# The node probe says where dcgmi is: where it is on no node, no diagnostic job is submitted.
pytestmark = [pytest.mark.uses(jobs.NODE_PROBE), pytest.mark.uses(jobs.DCGM)]


@pytest.mark.gpu(gres_only=True)
def test_dcgm_diagnostics(measured, judge, node, profile):
    diag_runs = measured(jobs.DCGM)
    run = diag_runs.get(node)
    if run is None:
        pytest.fail(f"no dcgmi result came back from {node} (answered: {', '.join(diag_runs)})", pytrace=False)
    if not run.found and not profile.dcgm_required:
        not_applicable(
            f"dcgmi is not installed on {node} and profile {profile.name!r} does not require it (dcgm_required = false)"
        )
    if not run.found:
        pytest.fail(
            f"{node}: dcgmi is not installed, and profile {profile.name!r} requires DCGM diagnostics "
            "(dcgm_required = true)",
            pytrace=False,
        )
    judge.findings(dcgm_checks.diag_findings(run), f"{node}: dcgmi diag -r {run.level} found faults")

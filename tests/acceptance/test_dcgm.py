"""NVIDIA DCGM diagnostics where DCGM is installed: ``dcgmi diag -r <profile.dcgm_level>`` on every
node, every Fail or Warn named with the GPU and DCGM's own message. Not applicable on nodes without
dcgmi unless the profile requires DCGM (``dcgm_required = true``): then such a node fails.
"""

from __future__ import annotations

import pytest

from pytest_gpucluster import probe_checks
from pytest_gpucluster.checks import dcgm as dcgm_checks
from pytest_gpucluster.errors import GpuClusterError
from pytest_gpucluster.outcomes import not_applicable
from pytest_gpucluster.plan import jobs
from pytest_gpucluster.probe_checks import readings
from pytest_gpucluster.workloads import dcgm

pytestmark = [probe_checks.USES, pytest.mark.uses(jobs.DCGM)]


@pytest.fixture
def diag_runs(gpucluster):
    """node → DiagRun, from one exclusive job on every node for the whole run. When the node-probe
    job found no dcgmi on any node, no diagnostic job is submitted."""
    level = gpucluster.profile.dcgm_level

    def produce():
        spec = gpucluster.spec("dcgm", all_nodes=True, exclusive=True, timeout_min=dcgm_checks.job_minutes(level))
        return {r.value.node: r.value for r in gpucluster.run(dcgm.run_diag, spec, level=level) if r.value}

    try:
        where = readings(gpucluster, "dcgmi")
    except GpuClusterError:
        where = {}  # the probe job could not run: the diagnostic job finds out for itself
    if where and set(where) >= set(gpucluster.live_nodes) and all(path is None for path in where.values()):
        return {node: dcgm.DiagRun(node=node, found=False, level=level) for node in where}
    return gpucluster.once("dcgm", produce)


@pytest.mark.gpu(gres_only=True)
def test_dcgm_diagnostics(diag_runs, judge, node, profile):
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
    judge.problems(dcgm_checks.diag_problems(run), f"{node}: dcgmi diag -r {run.level} found faults")

"""perftest's ib_write_bw between node pairs where it is installed: neighbour pairs, all at once in
one job, each pair writing both ways over every InfiniBand port active on both nodes (the node
probe's reading), one TCP port per HCA (workloads/ib_write_bw.py). Every run's Gb/s is judged per
HCA, naming the node, the HCA and the peer (checks/ib_write_bw.py). Not applicable on one node, on
a node without ib_write_bw (the profile's ``ib_write_bw_path``, else the node's PATH) and on a node
without an active InfiniBand port.
"""

from __future__ import annotations

import pytest

from pytest_gpucluster.checks import ib_write_bw as judging
from pytest_gpucluster.outcomes import not_applicable
from pytest_gpucluster.plan import jobs

# The pairs' ports are the node probe's InfiniBand reading (or a job of their own); where the
# profile names no path and the probe found ib_write_bw on no node's PATH, no job is submitted.
pytestmark = [pytest.mark.uses(jobs.NODE_PROBE, jobs.INFINIBAND), pytest.mark.uses(jobs.IB_WRITE_BW)]


@pytest.mark.across_nodes
@pytest.mark.infiniband
def test_ib_write_bw_per_hca(measured, judge, node, profile, thresholds):
    ports, plan, writes, job = measured(jobs.IB_WRITE_BW)
    if node not in ports:
        pytest.fail(f"{node}: its InfiniBand ports could not be read, so it was not paired", pytrace=False)
    if not ports[node]:
        not_applicable(f"{node} has no active {profile.ib_link_layer} port (the node probe's reading)")
    line = getattr(thresholds.get(judging.METRIC), "fail_below", None)  # isolates a slow HCA's node
    found = judging.judge_node(node, plan, writes, job_id=job, fail_below=line)
    if found.not_applicable:
        not_applicable(found.not_applicable)
    judge.findings(found.problems, f"{node}: ib_write_bw could not measure every HCA")
    judge.all(found.measurements)

"""perftest's ib_write_bw between node pairs where it is installed: neighbour pairs, all at once in
one job, each pair writing both ways over every InfiniBand port active on both nodes (the node
probe's reading), one TCP port per HCA (workloads/ib_write_bw.py). Every run's Gb/s is judged per
HCA, naming the node, the HCA and the peer (checks/ib_write_bw.py). Not applicable on one node, on
a node without ib_write_bw (the profile's ``ib_write_bw_path``, else the node's PATH) and on a node
without an active InfiniBand port.
"""

from __future__ import annotations

import pytest

from pytest_gpucluster import probe_checks
from pytest_gpucluster.checks import ib_write_bw as judging
from pytest_gpucluster.errors import GpuClusterError
from pytest_gpucluster.outcomes import not_applicable
from pytest_gpucluster.plan import jobs
from pytest_gpucluster.probe_checks import good, readings
from pytest_gpucluster.workloads import ib_write_bw, infiniband

pytestmark = [probe_checks.USES, pytest.mark.uses(jobs.IB_WRITE_BW)]


def _ports(gpucluster):
    """node → its active InfiniBand ports, from the node probe (or a job of their own)."""

    def own_job():
        spec = gpucluster.spec("infiniband", all_nodes=True, gpus_per_node=0)
        return {r.node: r.value for r in gpucluster.run(infiniband.read_node, spec)}

    found = good(readings(gpucluster, "infiniband", fallback=own_job))
    return {node: judging.active_ports(r, gpucluster.profile.ib_link_layer) for node, r in found.items()}


@pytest.fixture
def pair_writes(gpucluster):
    """(ports, plan, node → NodeWrites, job id) from one job over every tested node, no GPU. When
    the profile names no path and the node probe found ib_write_bw on no node's PATH, no job is
    submitted."""
    p = gpucluster.profile

    def produce():
        try:
            ports = _ports(gpucluster)
        except GpuClusterError as exc:
            raise GpuClusterError(f"the InfiniBand ports to pair could not be read: {exc}") from exc
        plan = judging.plan_steps(judging.pairs_for(gpucluster.live_nodes), ports)
        if not plan.steps:
            return ports, plan, {}, None
        if p.ib_write_bw_path is None and probe_checks.absent_everywhere(gpucluster, "ib_write_bw"):
            why = "not on PATH (the node probe's reading)"
            return ports, plan, {n: ib_write_bw.NodeWrites(n, False, why) for n in gpucluster.live_nodes}, None
        wait = float(p.ib_write_bw_timeout_s)
        minutes = int(plan.longest * (2 * wait + p.ib_write_bw_timeout_s) // 60) + 5
        spec = gpucluster.spec(jobs.IB_WRITE_BW.key, all_nodes=True, gpus_per_node=0, timeout_min=minutes)
        results = gpucluster.run(
            ib_write_bw.run_pairs,
            spec,
            steps=plan.steps,
            path=p.ib_write_bw_path,
            timeout_s=p.ib_write_bw_timeout_s,
            connect_wait_s=wait,
        )
        return ports, plan, {r.value.node: r.value for r in results if r.value}, results[0].job_id

    return gpucluster.once(jobs.IB_WRITE_BW.key, produce)


@pytest.mark.across_nodes
@pytest.mark.infiniband
def test_ib_write_bw_per_hca(pair_writes, judge, node, profile):
    ports, plan, writes, job = pair_writes
    if node not in ports:
        pytest.fail(f"{node}: its InfiniBand ports could not be read, so it was not paired", pytrace=False)
    if not ports[node]:
        not_applicable(f"{node} has no active {profile.ib_link_layer} port (the node probe's reading)")
    found = judging.judge_node(node, plan, writes, job_id=job)
    if found.not_applicable:
        not_applicable(found.not_applicable)
    judge.problems(list(found.problems), f"{node}: ib_write_bw could not measure every HCA")
    judge.all(found.measurements)

"""InfiniBand: every node has the profile's number of HCAs, each port ACTIVE
and LinkUp at the profile's rate and link layer. A failure names ``node:device/port``."""

from __future__ import annotations

import pytest

from pytest_gpucluster import probe_checks
from pytest_gpucluster.checks import infiniband as infiniband_checks
from pytest_gpucluster.probe_checks import reading_of, readings
from pytest_gpucluster.workloads import infiniband

pytestmark = probe_checks.USES


@pytest.fixture
def ib_nodes(gpucluster):
    """Every node's IB ports, read once per run in the node probe; if its job cannot run (it
    holds every GPU), in a job of their own that asks for none."""

    def own_job():
        spec = gpucluster.spec("infiniband", all_nodes=True, gpus_per_node=0)
        return {r.node: r.value for r in gpucluster.run(infiniband.read_node, spec)}

    return readings(gpucluster, "infiniband", fallback=own_job)


@pytest.mark.quick
@pytest.mark.infiniband
def test_infiniband_ports(ib_nodes, node, profile, judge):
    ports = reading_of(ib_nodes, node, "InfiniBand report")
    problems = infiniband_checks.problems(
        ports, hcas=profile.ib_hcas, rate_gbps=profile.ib_rate_gbps, link_layer=profile.ib_link_layer
    )
    judge.problems(problems, f"{node}: InfiniBand not as the profile expects")

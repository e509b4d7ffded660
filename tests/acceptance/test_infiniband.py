"""InfiniBand: every node has the profile's number of HCAs, each port ACTIVE
and LinkUp at the profile's rate and link layer. A failure names ``node:device/port``."""

from __future__ import annotations

import pytest

from pytest_gpucluster.checks import infiniband as infiniband_checks
from pytest_gpucluster.checks import probe
from pytest_gpucluster.plan import jobs

# The ports come from the node probe; if its job cannot run (it holds every GPU), from a job of
# their own that asks for none.
pytestmark = pytest.mark.uses(jobs.NODE_PROBE, jobs.INFINIBAND)


@pytest.mark.quick
@pytest.mark.infiniband
def test_infiniband_ports(measured, node, profile, judge):
    ib_nodes = measured(jobs.INFINIBAND)
    why = probe.missing(ib_nodes, node, "InfiniBand report")
    if why:
        pytest.fail(why, pytrace=False)
    found = infiniband_checks.findings(
        ib_nodes[node], hcas=profile.ib_hcas, rate_gbps=profile.ib_rate_gbps, link_layer=profile.ib_link_layer
    )
    judge.findings(found, f"{node}: InfiniBand not as the profile expects")

"""InfiniBand (seed 000, phase 5): every node has the profile's number of HCAs, each port ACTIVE
and LinkUp at the profile's rate and link layer. A failure names ``node:device/port``."""

from __future__ import annotations

import pytest

from pytest_gpucluster.workloads import infiniband


@pytest.fixture
def ib_nodes(gpucluster):
    """Every node's IB ports, read once per run in one job."""
    spec = gpucluster.spec("infiniband", all_nodes=True, gpus_per_node=0)

    def produce():
        return {r.node: r.value for r in gpucluster.run(infiniband.read_node, spec)}

    return gpucluster.once(("infiniband",), produce)


@pytest.mark.quick
def test_infiniband_ports(ib_nodes, node, profile, judge):
    if node not in ib_nodes:
        pytest.fail(f"{node}: no report came back (nodes that reported: {', '.join(ib_nodes)})")
    problems = infiniband.problems(ib_nodes[node], hcas=profile.ib_hcas, rate_gbps=profile.ib_rate_gbps,
                                   link_layer=profile.ib_link_layer)  # fmt: skip
    judge.problems(problems, f"{node}: InfiniBand not as the profile expects")

"""Example site check: every GPU pair of every node copies at the site's floor, measured by
nvbandwidth where it is installed (not applicable where it is not)."""

from __future__ import annotations

import pytest
import site_nvbandwidth

from pytest_gpucluster.outcomes import not_applicable
from pytest_gpucluster.plan import JobRequest
from pytest_gpucluster.verdict import Measurement

# The declaration: one job on every node, holding its GPUs; it measures, so it never starts ahead.
NVBANDWIDTH = JobRequest("site-nvbandwidth", "nvbandwidth's device-to-device matrix on every node", holds_gpus=True)
METRIC = "site.nvbandwidth.d2d_read"


@pytest.fixture
def bandwidth(gpucluster):
    """node → NodeBandwidth, from one job for the whole run."""

    def produce():
        spec = gpucluster.spec("site-nvbandwidth", all_nodes=True)
        return {r.node: r.value for r in gpucluster.run(site_nvbandwidth.run, spec)}

    return gpucluster.once(NVBANDWIDTH.key, produce)


@pytest.mark.gpu(2)
@pytest.mark.uses(NVBANDWIDTH)
def test_gpu_pairs_copy_at_the_site_floor(bandwidth, judge, node):
    found = bandwidth.get(node)
    if found is None:
        pytest.fail(f"{node}: no nvbandwidth result came back (answered: {', '.join(bandwidth)})", pytrace=False)
    if not found.found:
        not_applicable(f"nvbandwidth is not installed on {node}")
    judge.problems([f"{node}: {found.error}"] if found.error else [], f"{node}: nvbandwidth did not run")
    judge.all(Measurement(METRIC, gbps, "GB/s", where=f"{node}:{pair}") for pair, gbps in found.matrix.items())

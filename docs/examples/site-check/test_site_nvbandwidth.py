"""Example site check: every GPU pair of every node copies at the site's floor, measured by
nvbandwidth where it is installed (not applicable where it is not)."""

from __future__ import annotations

import pytest
import site_nvbandwidth

from pytest_gpucluster.outcomes import not_applicable
from pytest_gpucluster.plan import JobRequest, Shape
from pytest_gpucluster.verdict import Finding, Measurement

# The declaration: the workload, one task on every node holding all its GPUs; it measures, so it
# never starts ahead.
NVBANDWIDTH = JobRequest(
    "site-nvbandwidth",
    "nvbandwidth's device-to-device matrix on every node",
    workload=site_nvbandwidth.run,
    shape=Shape(),
    holds_gpus=True,
)
METRIC = "site.nvbandwidth.d2d_read"


@pytest.mark.gpu(2)
@pytest.mark.uses(NVBANDWIDTH)
def test_gpu_pairs_copy_at_the_site_floor(measured, judge, node):
    bandwidth = {r.node: r.value for r in measured()}  # one job for the whole run, every task's result
    found = bandwidth.get(node)
    if found is None:
        pytest.fail(f"{node}: no nvbandwidth result came back (answered: {', '.join(bandwidth)})", pytrace=False)
    if not found.found:
        not_applicable(f"nvbandwidth is not installed on {node}")
    # A fault without a number is a finding of its place: here the node (``gpu=i`` for one GPU).
    judge.findings(
        [Finding.on_node(node, f"{node}: {found.error}")] if found.error else [], f"{node}: nvbandwidth did not run"
    )
    # A number is a measurement of its place, judged against thresholds.toml.
    judge.all(Measurement.at(METRIC, gbps, "GB/s", node, detail=pair) for pair, gbps in found.matrix.items())

"""The soak (burn-in): after the one-shot checks, every node runs cycles of load on all its GPUs for
the duration asked for (``--gpucluster-soak=DURATION`` or the profile's ``soak.duration``), one
job per node, and each GPU is judged cycle by cycle against its node's best GPU and its own early
cycles, with throttling, memory errors, Xids, fabric counters, SDC and temperatures in the same
cycle (``[soak.rules]`` in thresholds.toml). A node whose soak fails ends it early and is named
with the cycle the fault began in; the others soak on.

Not applicable without a soak asked for; required where one was, or where the profile requires
one. Without GPU devices, CPU ranks stand in with tiny sizes (gloo).
"""

from __future__ import annotations

import pytest

from pytest_gpucluster.plan import jobs


@pytest.mark.soak
@pytest.mark.uses(jobs.SOAK)
def test_soak(measured, judge, node):
    soak = measured()
    error = soak.nodes[node].error if node in soak.nodes else None
    found = soak.of_node(node)
    if error is not None and not any(f.severity == "fail" for f in found):
        raise error  # the job's own error names whose fault it was (the node, the queue, the controller)
    judge.findings([*found, *soak.unjudged(node)], soak.summary(node))

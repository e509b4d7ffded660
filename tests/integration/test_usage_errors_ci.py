"""``--gpucluster-nodes`` against the real partition: names Slurm does not hold there are a usage error
before any job, naming them and the partition's nodes."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.integration


def test_nodes_outside_the_partition_are_refused_before_any_job(run_acceptance):
    run = run_acceptance("tests/acceptance/test_sharedfs.py", "--gpucluster-nodes=node[2,7-8]", timeout_s=120)
    assert run.returncode == pytest.ExitCode.USAGE_ERROR, run.output
    assert (
        "--gpucluster-nodes: node[7-8] are not in partition 'debug' of profile 'ci' (its nodes: node[1-" in run.output
    )
    assert run.results == {"tests": []}  # nothing ran, no results file was written

"""Silent data corruption: every GPU of every node, all at once, computes the same seeded chain of
GEMMs (workloads/sdc.py) and the results are compared bit for bit (checks/sdc.py).

Reference: GPUs of one model must be bit-identical, so the digest most GPUs of a model share
across the whole run is that model's answer. Where the chain is no larger than ``sdc.TINY`` (CPU
stand-ins, small profiles) the login node also computes it in float64 and every result must
match that within a tolerance; at GPU sizes the other models are held to the answer of the model
most GPUs have. Sizes come from the profile's [sdc] table; on nodes without GPUs, CPU ranks run
``TINY`` so the path is exercised.
"""

from __future__ import annotations

import pytest

from pytest_gpucluster.checks import sdc as judging
from pytest_gpucluster.outcomes import not_applicable
from pytest_gpucluster.plan import jobs


@pytest.mark.uses(jobs.SDC)
def test_gpus_compute_bit_identical_results(measured, judge, record, node):
    results, job, reference, note = measured()
    mine = [r for r in results if r.node == node]
    if not mine:
        pytest.fail(f"{node}: no result in job {job}", pytrace=False)
    record(
        "sdc",
        node=node,
        job=job,
        note=note,
        devices={
            r.gpu: {"device": r.device_name, "digest": r.digest, "elapsed_s": round(r.elapsed_s, 3)} for r in mine
        },
    )
    if reference is None and len({(r.device_name, r.config.dtype) for r in results}) == len(results) == 1:
        not_applicable(
            f"{mine[0].where} is the run's only device and the chain is larger than a float64 "
            "reference is computed for: nothing to compare its bits with"
        )
    found = judging.about_node(judging.findings(results, reference=reference), node)
    judge.findings(found, f"job {job}: {node} computed a wrong or differing result")

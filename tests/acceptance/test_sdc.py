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
from pytest_gpucluster.workloads import sdc
from pytest_gpucluster.workloads.compute import CPU_RANKS_PER_NODE


def _plan(gpucluster):
    """(config, tasks per node, GPUs per node, note): one task per GPU, or CPU ranks at ``TINY``."""
    if gpucluster.profile.gpus_are_real and gpucluster.gpus_per_node > 0:
        n = gpucluster.gpus_per_node
        return gpucluster.profile.sdc, n, n, ""
    note = f"no GPUs: {CPU_RANKS_PER_NODE} CPU ranks per node run the chain at n={sdc.TINY.n}, chain={sdc.TINY.chain}"
    return sdc.TINY, CPU_RANKS_PER_NODE, 0, note


def _wants_reference(config):
    """A float64 reference on the login node only for chains no larger than ``TINY``'s."""
    return config.n**3 * config.chain <= sdc.TINY.n**3 * sdc.TINY.chain


@pytest.fixture
def chain_results(gpucluster):
    """(every device's result, the job id, the float64 reference or None, the plan's note)."""

    def produce():
        config, tasks, gpus, note = _plan(gpucluster)
        spec = gpucluster.spec("sdc", all_nodes=True, tasks_per_node=tasks, gpus_per_node=gpus)
        results = gpucluster.run(sdc.run, spec, config=config)
        reference = sdc.reference(config) if _wants_reference(config) else None
        return [r.value for r in results], results[0].job_id, reference, note

    return gpucluster.once(jobs.SDC.key, produce)


def _names(sentence, node):
    """Whether a problem sentence names ``node`` (as ``node:gpuN``) or names no device at all."""
    return f"{node}:" in sentence or (":gpu" not in sentence and ":cpu" not in sentence)


@pytest.mark.uses(jobs.SDC)
def test_gpus_compute_bit_identical_results(chain_results, judge, record, node):
    results, job, reference, note = chain_results
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
    problems = [p for p in judging.problems(results, reference=reference) if _names(p, node)]
    judge.problems(problems, f"job {job}: {node} computed a wrong or differing result")

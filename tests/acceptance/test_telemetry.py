"""Telemetry under load (seed 001, the monitoring harness): while every GPU of every node works,
no GPU idles while its peers work and no GPU slows down for heat or power faults.

The load is ``telemetry.matmul_all_reduce`` (GEMM + all_reduce on every GPU) run under
``under_telemetry``; any other workload can be wrapped the same way (docs/inventory-telemetry.md).
"""

from __future__ import annotations

import pytest

from pytest_gpucluster.verdict import Measurement
from pytest_gpucluster.workloads import telemetry


@pytest.fixture
def node_telemetry(gpucluster, record):
    """node → NodeTelemetry, from one loaded job for the whole run; series are recorded."""

    def produce():
        p, gpus = gpucluster.profile, gpucluster.gpus_per_node
        spec = gpucluster.spec("telemetry", all_nodes=True, tasks_per_node=gpus if p.gpus_are_real and gpus else 1)
        results = gpucluster.run(telemetry.under_telemetry, spec, fn=telemetry.matmul_all_reduce,
                                 seconds=p.compute.burn_s, matmul_n=p.compute.matmul_n,
                                 all_reduce_bytes=p.nccl.judge_from_bytes)  # fmt: skip
        return {r.value.telemetry.node: r.value.telemetry for r in results if r.value.telemetry}

    found = gpucluster.once("telemetry", produce)
    for series in telemetry.series_records(list(found.values())):
        record("series", **series)
    return found


def _of(found, node):
    if node not in found:
        pytest.fail(f"no telemetry came back from {node} (nodes that answered: {', '.join(found)})", pytrace=False)
    return found[node]


@pytest.mark.quick
def test_node_was_sampled(node_telemetry, judge, node):
    nt = _of(node_telemetry, node)
    problems = [f"{node}: {len(s)} {name} samples in {nt.wall_s:.1f} s at {nt.interval_s} s intervals"
                for name, s in nt.node_series.items() if len(s) < 2]  # fmt: skip
    judge.problems(problems, f"{node}: the telemetry sampler did not run")


@pytest.mark.gpu
def test_no_gpu_idles_while_its_peers_work(node_telemetry, judge, node):
    _of(node_telemetry, node)
    fractions = telemetry.idle_fractions(telemetry.absolute_util(list(node_telemetry.values())))
    judge.all([Measurement("telemetry.gpu_idle_fraction", f.percent, "%", where=w, detail=f.detail)
               for w, f in sorted(fractions.items()) if w.startswith(f"{node}:")])  # fmt: skip


@pytest.mark.gpu
def test_no_gpu_throttles_for_heat_or_power_faults(node_telemetry, judge, node):
    problems = telemetry.throttle_problems([_of(node_telemetry, node)])
    judge.problems(problems, f"{node}: GPU clocks slowed down for a reason that needs attention")

"""The headline command on the project's 2-node Slurm cluster: ``-m multinode`` is the whole
handover acceptance, with a short soak after the one-shot checks, and gives its verdict; a
narrower selection says PARTIAL."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.integration


def test_multinode_runs_the_whole_acceptance_and_gives_the_handover_verdict(run_acceptance):
    run = run_acceptance("tests/acceptance", "-m", "multinode and not slow", "--gpucluster-soak=28s")
    acc, sel = run.results["acceptance"], run.results["selection"]
    assert run.returncode == 0, run.output
    assert acc["verdict"] == "ACCEPTED", acc
    assert sel["not_selected"] == [] and sel["markexpr"] == "multinode and not slow"
    # Every required check ran and passed, or found at run time that it does not apply (MFU of a
    # CPU run, dcgmi not installed).
    judged = {t["nodeid"] for t in run.results["tests"] if t["verdict"] in ("pass", "warn", "n/a")}
    assert set(sel["required"]) <= judged, set(sel["required"]) - judged
    areas = {t["area"] for t in run.results["tests"] if t["verdict"] in ("pass", "warn")}
    # Every area the ci profile can judge was judged, not only what needs two nodes.
    assert {
        "slurm_health",
        "sharedfs",
        "placement",
        "gpu_isolation",
        "inventory",
        "nccl",
        "training",
        "compute",
        "rank_failure",
        "telemetry",
        "sdc",
        "soak",
    } <= areas, areas
    # The soak ran after the one-shot checks, on both nodes, every cycle of every rank recorded.
    soak = run.results["soak"]
    assert soak["requested_s"] == 28 and soak["findings"] == [], soak["findings"]
    for node in ("node1", "node2"):
        kept = soak["nodes"][node]
        assert kept["ended"] == "duration" and kept["cycles"] >= 5, kept
        assert all(len(g["tflops"]) == kept["cycles"] and all(g["tflops"]) for g in kept["gpus"].values()), kept
    order = [t["area"] for t in run.results["tests"]]
    last = ("fabric", "xid", "gpu_slowdown")  # the checks of the jobs that run last
    assert order.index("soak") > max(i for i, a in enumerate(order) if a not in ("soak", *last))
    # No InfiniBand and no GPU on the ci nodes: the fabric check says so on each node, never passes.
    fabric = [t for t in run.results["tests"] if t["area"] == "fabric"]
    assert len(fabric) == 2 and all(t["verdict"] == "n/a" for t in fabric), fabric
    # The checks of the jobs that run last (fabric, Xid, the time slowed) come last; the Xid and
    # slowdown checks have no GPU device to read on the ci nodes: n/a on each, never a pass.
    assert {t["area"] for t in run.results["tests"][-6:]} == set(last), run.results["tests"][-6:]
    gres_only = "profile 'ci' has GRES-only GPUs (gpus_are_real = false); this check needs GPU devices"
    for area in ("xid", "gpu_slowdown"):
        tests = [t for t in run.results["tests"] if t["area"] == area]
        assert len(tests) == 2 and all(t["verdict"] == "n/a" for t in tests), tests
        assert all(t["message"].endswith(gres_only) for t in tests), tests
    reasons = set(sel["not_applicable"].values())
    assert "profile 'ci' expects no InfiniBand (ib_hcas = 0)" in reasons
    assert "profile 'ci' runs without Slurm accounting (accounting = false)" not in reasons  # ci has slurmdbd


def test_a_narrower_selection_is_partial(run_acceptance):
    run = run_acceptance("tests/acceptance", "-m", "quick")
    acc = run.results["acceptance"]
    assert run.returncode == 0, run.output
    assert acc["verdict"] == "PARTIAL", acc
    assert acc["headline"].startswith("PARTIAL: ") and "required checks not selected" in acc["headline"]
    assert "gpucluster: PARTIAL: " in run.output

"""The fabric layer by layer: the layers' job declarations and their environments, the collectives
judged across nodes (alltoall among them by default), the straggler check's rounds of neighbour
pairs on 1 to 9 nodes, and its judging on the pairs the test cluster recorded
(tests/data/straggler/)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from pytest_gpucluster.checks import straggler
from pytest_gpucluster.checks.pairing import neighbour_rounds
from pytest_gpucluster.config import Profile, Threshold
from pytest_gpucluster.config.load import load
from pytest_gpucluster.config.profile import NcclAcross, across_nodes
from pytest_gpucluster.config.thresholds import shape_specific
from pytest_gpucluster.errors import ConfigError
from pytest_gpucluster.launch import JobSpec
from pytest_gpucluster.launch.local_backend import LocalLauncher
from pytest_gpucluster.plan import Facts, Use, facts, jobs, make_plan
from pytest_gpucluster.plan.jobs import COMPUTE_RANKS_MATCH, INTRA_NODE_PEERS, TORCH_SWEEPS
from pytest_gpucluster.workloads.collectives import layered_sweeps
from pytest_gpucluster.workloads.pair_exchange import PairResult

REPO = Path(__file__).resolve().parents[2]
DATA = Path(__file__).resolve().parents[1] / "data" / "straggler"
LOCAL = Profile("local", executor="local")


@pytest.fixture(scope="module")
def shipped():
    return load(REPO / "thresholds.toml")


# ------------------------------------------------------------------ declarations


def test_each_layer_is_a_job_of_its_own_with_its_paths_environment():
    keys = [r.key for r in jobs.SUITE]
    assert len(keys) == len(set(keys))
    nvlink, network = dict(jobs.NCCL_NVLINK_ONLY.env), dict(jobs.NCCL_NETWORK_ONLY.env)
    # NVLink alone: peer-to-peer over NVLink only, no shared memory, no NIC to fall back on.
    assert nvlink == {"NCCL_P2P_LEVEL": "NVL", "NCCL_SHM_DISABLE": "1", "NCCL_NET": "Socket"}
    # The network alone: every GPU, on its own node too, through its NIC.
    assert network == {"NCCL_P2P_DISABLE": "1", "NCCL_SHM_DISABLE": "1"}
    # The collective sweeps' own declarations keep NCCL's choice of path.
    assert jobs.NCCL_INTRA.env == jobs.NCCL_INTER.env == jobs.NEIGHBOUR_PAIRS.env == ()
    for request in (jobs.NCCL_NVLINK_ONLY, jobs.NCCL_NETWORK_ONLY, jobs.NEIGHBOUR_PAIRS):
        assert request.shape == jobs.Shape(tasks_per_node=jobs.RANKS) and not request.light


def _plan(gpus: int, nodes: int):
    flags = {TORCH_SWEEPS, COMPUTE_RANKS_MATCH} | ({INTRA_NODE_PEERS} if gpus != 1 else set())
    f = Facts(gpus_per_node=gpus, flags=frozenset(flags), sees_whole_selection=True)
    uses = [
        Use(jobs.NCCL_NVLINK_ONLY, "test_nccl_layers.py::test_busbw_on_nvlink_alone"),
        Use(jobs.NCCL_NETWORK_ONLY, "test_nccl_layers.py::test_busbw_through_the_nics_alone_across_nodes"),
    ]
    if nodes > 1:
        uses.append(Use(jobs.NEIGHBOUR_PAIRS, "test_nccl_layers.py::test_no_straggler_among_neighbour_pairs"))
    return make_plan(uses, f)


def test_nvlink_alone_is_planned_only_where_a_node_has_peers():
    plan = _plan(1, 4)
    assert "nccl-nvlink-only" not in plan.jobs and "nccl-nvlink-only" in plan.dropped
    assert {"nccl-network-only", "neighbour-pairs"} <= set(plan.jobs)
    plan = _plan(8, 2)
    assert {"nccl-nvlink-only", "nccl-network-only", "neighbour-pairs"} <= set(plan.jobs)
    assert not any(plan.jobs[k].ahead for k in ("nccl-nvlink-only", "nccl-network-only", "neighbour-pairs"))
    # Without the across-node sweeps in the run, the pairs are a job of their own ...
    assert plan.rides_in("neighbour-pairs") is None
    # ... with them, the pairs ride after the sweeps in their job.
    f = Facts(gpus_per_node=8, flags=frozenset({TORCH_SWEEPS, INTRA_NODE_PEERS}), sees_whole_selection=True)
    uses = [
        Use(jobs.NCCL_INTER, "test_nccl.py::test_busbw_across_nodes"),
        Use(jobs.NEIGHBOUR_PAIRS, "test_nccl_layers.py::test_no_straggler_among_neighbour_pairs"),
    ]
    assert make_plan(uses, f).rides_in("neighbour-pairs") == "nccl-inter"


# ------------------------------------------------------------------ lines and settings


def test_alltoall_is_judged_across_nodes_unless_the_profile_names_the_collectives():
    profile = Profile("p", executor="slurm", nodes=2, gpus_per_node=8)
    assert across_nodes(profile).ops == ("all_reduce", "all_gather", "reduce_scatter", "alltoall")
    assert profile.nccl.ops == ("all_reduce", "all_gather", "reduce_scatter")  # inside a node: unchanged
    named = dataclasses.replace(profile, nccl_across=NcclAcross(ops=("all_reduce",)))
    assert across_nodes(named).ops == ("all_reduce",)


def test_an_unknown_collective_across_nodes_is_refused_naming_the_key(tmp_path):
    path = tmp_path / "thresholds.toml"
    path.write_text(
        (REPO / "thresholds.toml").read_text()
        + '\n[profiles.x]\nextends = "ci"\n[profiles.x.nccl_across]\nops = ["sendrecv"]\n'
    )
    with pytest.raises(ConfigError, match=r"nccl_across.ops.*unknown collective 'sendrecv'"):
        load(path).profile("x")


def test_the_layers_lines_hold_for_one_node_shape():
    for scope in ("nvlink_only", "network_only", "network_only_inter_node"):
        assert shape_specific(f"nccl.all_reduce.{scope}")
    assert not shape_specific("nccl.sendrecv.pair_busbw")


def test_the_test_cluster_proves_the_paths_and_the_gpu_sets_say_why_they_do_not_judge(shipped):
    cpu = shipped.thresholds_for(shipped.profile("ci"))
    for metric in (
        "nccl.all_reduce.nvlink_only",
        "nccl.all_reduce.network_only",
        "nccl.all_reduce.network_only_inter_node",
        "nccl.sendrecv.pair_busbw",
        "nccl.sendrecv.pair_latency",
    ):
        assert cpu[metric].origin == "path", metric
    h200 = shipped.thresholds_for(shipped.profile("nebius-h200"))
    # No InfiniBand on the test machines: no measured line, and the reason points at calibration.
    for metric in ("nccl.all_reduce.network_only", "nccl.all_reduce.network_only_inter_node"):
        assert h200.get(metric) is None
        assert "--gpucluster-calibrate=PATH" in h200.missing(metric)
    # Nodes of 8 H200: NVLink alone takes the ring intra-node line, inferred as for 4 and 2 GPUs.
    nvlink = h200["nccl.all_reduce.nvlink_only"]
    assert nvlink.fail_below == h200["nccl.all_reduce.intra_node"].fail_below and "inferred" in nvlink.evidence
    latency = h200["nccl.sendrecv.pair_latency"]
    assert latency.fail_above == 8 and "cluster-health-scanner" in latency.evidence
    # alltoall across nodes has its line from the fabric wherever the others do.
    assert h200["nccl.alltoall.inter_node"].origin == "derived"


def _nvlink_alone(shipped, profile):
    p = shipped.profile(profile)
    return shipped.thresholds_for(p, gpu_model=p.gpu_model, gpus_per_node=p.gpus_per_node)[
        "nccl.all_reduce.nvlink_only"
    ]


def test_nvlink_alone_at_4_h200_is_inferred_from_a_plain_sweep_that_went_over_nvlink_alone(shipped):
    line = _nvlink_alone(shipped, "testbox")
    assert line.fail_below == 320 and "P2P/CUMEM alone" in line.evidence and "355.0" in line.evidence
    assert line.evidence.startswith("inferred, not yet run with these settings")


def test_nvlink_alone_at_2_h200_rests_on_its_own_runs(shipped):
    line = _nvlink_alone(shipped, "testbox-2x2")
    assert line.fail_below == 295 and "326.5 and 328.2 GB/s" in line.evidence
    assert "results-2xh200-readme.json" in line.evidence and "inferred" not in line.evidence


def test_gpus_without_an_infiniband_nic_have_no_nic_layer(shipped):
    assert "ib_hcas = 0" in facts.no_nic_layer(shipped.profile("testbox"))
    assert facts.no_nic_layer(shipped.profile("nebius-h200")) is None
    assert facts.no_nic_layer(shipped.profile("ci")) is None  # CPU stand-ins keep the path


# ------------------------------------------------------------------ the straggler check's pairs


@pytest.mark.parametrize("n", range(1, 10))
def test_neighbour_rounds_pair_every_node_with_its_ring_neighbours(n):
    nodes = [f"n{i}" for i in range(n)]
    rounds = neighbour_rounds(nodes)
    pairs = [p for r in rounds for p in r]
    for r in rounds:  # a round's pairs run at once: disjoint
        used = [x for p in r for x in p]
        assert len(used) == len(set(used))
    assert len({frozenset(p) for p in pairs}) == len(pairs)  # no pair twice
    partners = {x: {y for p in pairs if x in p for y in p if y != x} for x in nodes}
    if n == 1:
        assert rounds == []
    elif n == 2:
        assert rounds == [[("n0", "n1")]]
    else:
        # the ring: each node with the one before and the one after it, so two partners each
        assert all(partners[f"n{i}"] == {f"n{(i - 1) % n}", f"n{(i + 1) % n}"} for i in range(n))
        assert len(rounds) == (2 if n % 2 == 0 else 3)


def test_neighbour_rounds_refuse_repeated_names():
    with pytest.raises(ValueError, match="repeat"):
        neighbour_rounds(["a", "b", "a"])


def _recorded() -> PairResult:
    """The pair the test cluster measured (gloo, two nodes, two CPU ranks each)."""
    raw = json.loads((DATA / "pairs_ci_2x2_gloo.json").read_text())
    (pair,) = raw["pairs"]
    return PairResult(**{**pair, "nodes": tuple(pair["nodes"])})


def _ring(n: int, slow: dict[tuple[str, str], float] | None = None) -> list[PairResult]:
    """The recorded pair laid over every pair of an ``n``-node ring, ``slow`` pairs at a fraction
    of its bandwidth."""
    base, slow = _recorded(), slow or {}
    out = []
    for index, pairs in enumerate(neighbour_rounds([f"n{i}" for i in range(n)])):
        for pair in pairs:
            share = slow.get(pair, 1.0)
            out.append(dataclasses.replace(base, nodes=pair, round=index, busbw=base.busbw * share))
    return out


LINES = {
    straggler.LATENCY: Threshold(straggler.LATENCY, "ms", fail_above=1000),
    straggler.BANDWIDTH: Threshold(straggler.BANDWIDTH, "GB/s", fail_below=0.05),
}


def test_the_recorded_pair_passes():
    judged = straggler.judge_pairs([_recorded()], LINES)
    assert [v.status for v in judged.verdicts] == ["pass", "pass"]
    assert judged.findings == judged.slow_pairs == judged.slow_nodes == ()


@pytest.mark.parametrize(("n", "bad"), [(3, "n0"), (4, "n2"), (5, "n4"), (6, "n1"), (7, "n3")])
def test_a_node_slow_with_both_partners_is_named(n, bad):
    ring = [p for r in neighbour_rounds([f"n{i}" for i in range(n)]) for p in r]
    judged = straggler.judge_pairs(_ring(n, {p: 0.01 for p in ring if bad in p}), LINES)
    assert judged.slow_nodes == (bad,)
    assert len(judged.findings) == 2 and all(f.culprits == (bad,) for f in judged.findings)
    assert all(f.convicts == (bad,) for f in judged.findings)
    assert f"{bad} is slow with every partner" in judged.findings[0].text


def test_a_pair_slow_together_only_is_named_and_convicts_neither_node():
    judged = straggler.judge_pairs(_ring(4, {("n1", "n2"): 0.01}), LINES)
    assert judged.slow_pairs == (("n1", "n2"),) and judged.slow_nodes == ()
    (finding,) = judged.findings
    assert finding.nodes == ("n1", "n2") and finding.convicts == ()
    assert "the pair's own path" in finding.text and "below the fail line" in finding.text


def test_two_nodes_make_one_pair_that_cannot_tell_which_node():
    judged = straggler.judge_pairs(_ring(2, {("n0", "n1"): 0.01}), LINES)
    (finding,) = judged.findings
    assert finding.convicts == () and "a third node tells" in finding.text


def test_every_pair_slow_is_a_fault_common_to_all_and_convicts_no_node():
    ring = [p for r in neighbour_rounds([f"n{i}" for i in range(4)]) for p in r]
    judged = straggler.judge_pairs(_ring(4, dict.fromkeys(ring, 0.01)), LINES)
    assert judged.slow_nodes == () and len(judged.findings) == 4
    assert all(f.convicts == () and "common to all" in f.text for f in judged.findings)


def test_wrong_data_makes_a_pair_slow_whatever_its_speed():
    wrong = dataclasses.replace(_recorded(), wrong=3)
    (finding,) = straggler.judge_pairs([wrong], LINES).findings
    assert "3 element(s) received wrong" in finding.text and finding.severity == "fail"


def test_without_a_bandwidth_line_the_pairs_are_judged_by_latency_and_warn_how_to_set_one(shipped):
    h200 = shipped.thresholds_for(shipped.profile("nebius-h200"))
    judged = straggler.judge_pairs([_recorded()], straggler.lines(h200))
    assert [v.metric for v in (v.measurement for v in judged.verdicts)] == [straggler.LATENCY]
    assert [m.metric for m in judged.unjudged] == [straggler.BANDWIDTH]
    (missing,) = straggler.with_missing(judged, h200)
    assert missing.severity == "warn" and missing.convicts == ()
    assert missing.setting == "thresholds.nebius-h200.nccl.sendrecv.pair_busbw"
    assert "--gpucluster-calibrate=PATH" in missing.text and "docs/nccl.md" in missing.text


# ------------------------------------------------------------------ the NIC layer's one job


def test_one_job_sweeps_each_layout_in_turn_and_records_the_layers_settings(tmp_path):
    """Through submitit's local executor: two gloo ranks on this machine, the node's communicator
    then the world's, in one process group, the job's NCCL settings kept with each sweep."""
    launcher = LocalLauncher(folder=tmp_path, queue_timeout_s=60, poll_s=0.2)
    spec = JobSpec(name="layers-unit", nodes=1, tasks_per_node=2, gpus_per_node=0, timeout_min=3)
    spec = dataclasses.replace(spec, env=dict(jobs.NCCL_NETWORK_ONLY.env))
    small = {"min_bytes": 4096, "max_bytes": 8192, "warmup_iters": 1, "iters": 2, "timeout_s": 60}
    for layouts in (("node", "world"), ("world",)):
        first, second = launcher.run(layered_sweeps, spec, ops=("all_reduce",), layouts=layouts, **small)
        assert second.value == []  # every group's first rank reports
        assert len(first.value) == len(layouts)
        for sweep in first.value:
            assert sweep.correct and sweep.backend == "gloo" and all(r.busbw > 0 for r in sweep.rows)
            assert {k: sweep.env[k] for k in ("NCCL_P2P_DISABLE", "NCCL_SHM_DISABLE")} == dict(
                jobs.NCCL_NETWORK_ONLY.env
            )

"""tools/prove-multinode-gpu on the 4-GPU machine split into test-cluster nodes: the pure parts
(shapes, squeue's node lists, the GPU a fault pins, what each run must say, what a re-test merges
with) and its dry run, which writes every command it would run and starts none."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import sys
from pathlib import Path

import pytest

from gpucluster_testcluster import gpus
from gpucluster_testcluster.config import ClusterSpec
from gpucluster_testcluster.state import node_gpus as _node_gpus
from pytest_gpucluster import config

REPO = Path(__file__).resolve().parents[2]


def _tool():
    loader = importlib.machinery.SourceFileLoader("prove_multinode_gpu", str(REPO / "tools" / "prove-multinode-gpu"))
    spec = importlib.util.spec_from_loader("prove_multinode_gpu", loader)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    loader.exec_module(module)
    return module


T = _tool()


def test_shapes_name_nodes_and_gpus():
    assert T.parse_shape("2x2") == (2, 2) and T.parse_shape("4x1") == (4, 1)
    assert T.shape_nodes("4x1") == ("node1", "node2", "node3", "node4")
    for bad in ("1x4", "2x0", "2by2", ""):
        with pytest.raises(ValueError):
            T.parse_shape(bad)
    assert T.SPLIT_STEPS[0] == "2x2-handover" and T.SPLIT_STEPS[-1] == "down"
    assert {s.split("-", 1)[0] for s in T.SPLIT_STEPS[:-1]} == {"2x2", "4x1", "2x1"}


def test_a_machine_runs_the_shapes_its_gpus_hold():
    assert T.shapes_for(4) == ("2x2", "4x1", "2x1") and T.shapes_for(2) == ("2x1",) and T.shapes_for(1) == ()
    steps = T.split_steps(T.shapes_for(2))
    assert steps[0] == "2x1-handover" and steps[-1] == "down"
    assert all(s.startswith("2x1-") for s in steps[:-1]) and len(steps) == len(T.SPLIT_KINDS) + 1


@pytest.mark.parametrize(
    ("hostlist", "nodes"),
    [
        ("node2", ["node2"]),
        ("node[1-2]", ["node1", "node2"]),
        ("node[1,3-4]", ["node1", "node3", "node4"]),
        ("node1,node[3-4]", ["node1", "node3", "node4"]),
        ("gpu-[09-11]", ["gpu-09", "gpu-10", "gpu-11"]),
        ("", []),
    ],
)
def test_squeue_node_lists_are_expanded(hostlist, nodes):
    assert T.hostlist_nodes(hostlist) == nodes


def test_a_job_running_on_node2_is_told_from_one_pending_or_elsewhere():
    row = {"id": "7", "state": "RUNNING", "name": "x-nccl-inter", "nodes": "node[1-2]"}
    assert T.running_on(row, "node2")
    assert not T.running_on({**row, "state": "PENDING"}, "node2")
    assert not T.running_on({**row, "nodes": "node[3-4]"}, "node2")


def test_the_gemm_fault_pins_node2s_first_gpu_by_the_uuid_the_cluster_recorded():
    # Minors out of bus order: node2's first GPU (its jobs' gpu0) is the third in bus order.
    machine = (
        gpus.Gpu("0000:18:00.0", 3, "GPU-a"),
        gpus.Gpu("0000:2a:00.0", 2, "GPU-b"),
        gpus.Gpu("0000:9a:00.0", 0, "GPU-c"),
        gpus.Gpu("0000:ab:00.0", 1, "GPU-d"),
    )
    spec = ClusterSpec(nodes=2, gpus_per_node=2, gpu_mode="real", real_gpu_count=4, gpu_minors=(3, 2, 0, 1))
    record = {"node_gpus": _node_gpus(spec, machine)}
    assert T.fault_gpu(record, "node2") == ("GPU-c", "/dev/nvidia0")
    assert T.fault_gpu(record, "node1", 1) == ("GPU-b", "/dev/nvidia2")
    fake = {"node_gpus": _node_gpus(ClusterSpec(nodes=2, gpus_per_node=2), ())}
    with pytest.raises(ValueError, match="names no UUID for node2's GPU 0"):
        T.fault_gpu(fake, "node2")


def _doc(verdict, summary, exclude="", nodes=None, reasons=()):
    """The parts of a results document the tool reads (results.json's "acceptance")."""
    verdicts = {n: {"verdict": v} for n, v in (nodes or {}).items()}
    nodes_part = {"summary": summary, "exclude": exclude, "verdicts": verdicts}
    return {"acceptance": {"verdict": verdict, "reasons": list(reasons), "nodes": nodes_part}}


NODES = ("node1", "node2", "node3", "node4")
CLEAN = T.Expect(NODES)
GEMM = T.Expect(NODES, ("REJECTED",), "node2:gpu0", "node2")


def test_a_clean_handover_must_accept_every_node():
    ok = _doc("ACCEPTED", "4 of 4 nodes accepted", nodes=dict.fromkeys(NODES, "ACCEPTED"))
    assert T.unmet(ok, CLEAN) == []
    partial = _doc("PARTIAL", "0 of 4 nodes accepted; not judged in full: node[1-4]", nodes={})
    assert T.unmet(partial, CLEAN) == [
        "verdict PARTIAL, expected ACCEPTED",
        "nodes: '0 of 4 nodes accepted; not judged in full: node[1-4]', expected '4 of 4 nodes accepted'",
    ]
    assert T.unmet(None, CLEAN) == ["no results file"]


def test_a_fault_run_must_name_the_culprit_first_accept_the_rest_and_exclude_only_node2():
    verdicts = {"node1": "ACCEPTED", "node2": "REJECTED", "node3": "ACCEPTED", "node4": "ACCEPTED"}
    first = "node2:gpu0: compute.matmul_bf16 = 346 TFLOP/s is below the fail line 650 (test_compute.py::x[node2])"
    ok = _doc("REJECTED", "3 of 4 nodes accepted; rejected: node2", "node2", verdicts, [first, "node2: ..."])
    assert T.unmet(ok, GEMM) == []
    assert "node2:gpu0" in GEMM.describe() and "--exclude=node2" in GEMM.describe()
    # The first sentence names the node but not the GPU; node1 only incomplete; two nodes excluded.
    worse = _doc(
        "REJECTED",
        "2 of 4 nodes accepted; rejected: node[2-3]",
        "node[2-3]",
        {**verdicts, "node1": "INCOMPLETE", "node3": "REJECTED"},
        ["node2: nccl.all_reduce.intra_node = 163 GB/s ..."],
    )
    assert T.unmet(worse, GEMM) == [
        "first reason 'node2: nccl.all_reduce.intra_node = 163 GB/s ...' does not name node2:gpu0",
        "healthy nodes not accepted: node1 INCOMPLETE, node3 REJECTED",
        "sbatch --exclude=node[2-3], expected --exclude=node2",
    ]


def test_the_retest_is_judged_on_the_merged_handover():
    expect = T.Expect(NODES[:2], fault_node="node2", merged=True)
    merged = {"handover": {"verdict": "ACCEPTED", "summary": "2 of 2 nodes accepted", "retested": ["node2"]}}
    assert T.unmet(merged, expect) == []
    assert T.unmet({"handover": {**merged["handover"], "retested": ["node1", "node2"]}}, expect) == [
        "re-tested ['node1', 'node2'], expected ['node2']"
    ]
    assert T.unmet({"acceptance": {}}, expect) == [
        "no merged handover in the results (--gpucluster-merge-results did not merge)"
    ]


def test_the_retest_merges_with_the_first_fault_run_that_rejected_node2_alone(tmp_path):
    runs = [
        ("2x2-gemm", _doc("REJECTED", "", "node[1-2]", {}), tmp_path / "a.json"),
        ("2x2-slurmd-killed", None, tmp_path / "b.json"),
        ("2x2-gres-hidden", _doc("REJECTED", "", "node2", {}), tmp_path / "c.json"),
        ("2x2-link-cut", _doc("REJECTED", "", "node2", {}), tmp_path / "d.json"),
    ]
    assert T.merge_base(runs, "node2") == tmp_path / "c.json"
    assert T.merge_base(runs[:2], "node2") is None


def test_the_retest_runs_under_the_profile_of_the_run_it_merges_with(tmp_path):
    # The link cut runs under testbox-SHAPE-long; a merge refuses a re-test of another profile.
    (tmp_path / "cut.json").write_text('{"profile": "testbox-2x1-long", "acceptance": {}}')
    (tmp_path / "torn.json").write_text('{"profile": ')
    assert T.merged_profile(tmp_path / "cut.json") == "testbox-2x1-long"
    assert T.merged_profile(tmp_path / "torn.json") is None and T.merged_profile(tmp_path / "gone.json") is None


def test_every_judged_figure_goes_into_the_log():
    doc = {
        "tests": [
            {"measurements": [{"metric": "nccl.all_reduce.inter_node", "where": "node1+node2", "value": 1.61234567}]},
            {
                "measurements": [
                    {"metric": "compute.matmul_bf16", "where": "node2:gpu0", "value": 752.7, "unit": "TFLOP/s"}
                ]
            },
        ]
    }
    assert T.figures(doc) == [
        "nccl.all_reduce.inter_node[node1+node2] = 1.61235  ",
        "compute.matmul_bf16[node2:gpu0] = 752.7 TFLOP/s ",
    ]


@pytest.mark.parametrize("fake", [False, True])
def test_the_prove_thresholds_load_with_the_split_profiles_and_their_long_sweeps(tmp_path, fake):
    prover = T.Prover(tmp_path / "out", tmp_path, fake, 60, T.WHOLE, dry=True)
    loaded = config.load(prover.thresholds)
    for shape in T.SHAPES:
        name = prover.split_profile(shape)
        nodes, gpus_per_node = T.parse_shape(shape)
        assert (loaded.profile(name).nodes, loaded.profile(name).gpus_per_node) == (nodes, gpus_per_node)
        long = config.profile.across_nodes(loaded.profile(f"{name}-long"))
        assert long.max_bytes == 256 * 2**20 and long.iters == 100
        assert loaded.profile(f"{name}-long").nccl == loaded.profile(name).nccl


def test_the_dry_run_writes_every_command_and_expectation_and_runs_none(tmp_path):
    out = tmp_path / "out"
    assert T.main([str(out), "--dry-run", "--split", "2x2-gres-hidden", "2x2-retest", "4x1-link-cut"]) == 0
    log = (out / "commands.log").read_text()
    assert "up --nodes 2 --timeout 90 --gpu-mode real --gpus-per-node 2" in log and "--hide-gpus-on node2" in log
    assert "--share-gpus" not in log
    assert "--cluster=testbox-2x2 " in log and "--cluster=testbox-4x1-long " in log
    assert "2x2-retest: expected merged handover ACCEPTED, 2 of 2 nodes accepted, node2 re-tested" in log
    assert "--gpucluster-merge-results=" in log
    assert "4x1-link-cut: fault: node2's eth0 down 8 s into the across-node sweep  (dry run: not done)" in log
    assert log.count("(dry run: not run)") == 6  # three bring-ups and three suites
    assert (out / "summary.txt").read_text().splitlines()[0] == "2x2-gres-hidden: dry run, its commands in commands.log"
    with pytest.raises(SystemExit):
        T.main([str(out), "--dry-run", "--split", "2x2-competing"])

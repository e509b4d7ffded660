"""ib_write_bw: the pair plan, parsing the client's result (tests/data/ib_write_bw_*, see
tests/data/README.md), judging per HCA against the shipped h100 line, and the workload's answers
when the binary is absent, finds no device, or waits on a client that never comes."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from pytest_gpucluster.checks import ib_write_bw as judging
from pytest_gpucluster.config.load import load
from pytest_gpucluster.verdict import judge
from pytest_gpucluster.workloads import ib_write_bw
from pytest_gpucluster.workloads.context import local_context
from pytest_gpucluster.workloads.ib_write_bw import Hca, NodeWrites, Step, WriteResult
from pytest_gpucluster.workloads.tools import find_tool

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "tests" / "data"
HEALTHY = (DATA / "ib_write_bw_client_ndr_representative_sample.txt").read_text()
HALF = (DATA / "ib_write_bw_client_half_rate_representative_sample.txt").read_text()
NO_SERVER = (DATA / "ib_write_bw_client_no_server_representative_sample.txt").read_text()
NO_DEVICE = (DATA / "ib_write_bw_no_device_perftest_4.5.txt").read_text()
TWO_PORTS = [("mlx5_0", "1"), ("mlx5_1", "1")]


@pytest.fixture(scope="module")
def h100():
    config = load(REPO / "thresholds.toml")
    return config.thresholds_for(config.profile("nebius"))


def test_the_result_row_gives_the_average_in_gbps():
    assert judging.parse_bw(HEALTHY) == 392.37
    assert judging.parse_bw(HALF) == 187.52
    assert judging.parse_bw(NO_SERVER) is None
    assert judging.parse_bw(NO_DEVICE) is None
    mib = HEALTHY.replace("[Gb/sec]", "[MiB/sec]").replace("392.37", "46774.00")
    assert judging.parse_bw(mib) == pytest.approx(392.37, abs=0.01)


def test_neighbour_pairs_and_an_odd_node_with_the_first():
    assert judging.pairs_for(["n1", "n2", "n3", "n4"]) == [("n1", "n2"), ("n3", "n4")]
    assert judging.pairs_for(["n1", "n2", "n3"]) == [("n1", "n2"), ("n3", "n1")]
    assert judging.pairs_for(["n1"]) == []


def test_every_pair_writes_both_ways_and_meets_on_ports_of_its_own():
    ports = {n: TWO_PORTS for n in ("n1", "n2", "n3")}
    plan = judging.plan_steps(judging.pairs_for(["n1", "n2", "n3"]), ports)
    assert [(s.role, s.peer) for s in plan.steps["n1"]] == [
        ("server", "n2"),
        ("client", "n2"),
        ("client", "n3"),
        ("server", "n3"),
    ]
    # The odd node out serves its pair's first direction as soon as the job starts.
    assert [(s.role, s.peer) for s in plan.steps["n3"]] == [("server", "n1"), ("client", "n1")]
    assert plan.longest == 4
    tcp = [h.tcp_port for steps in plan.steps.values() for s in steps if s.role == "server" for h in s.hcas]
    assert len(tcp) == len(set(tcp)) == 8  # 2 pairs × 2 directions × 2 HCAs
    assert min(tcp) == judging.BASE_TCP_PORT


def test_a_port_active_on_one_node_only_is_reported_against_the_other():
    plan = judging.plan_steps([("n1", "n2")], {"n1": TWO_PORTS, "n2": TWO_PORTS[:1]})
    assert [h.device for h in plan.steps["n1"][0].hcas] == ["mlx5_0"]
    assert list(plan.unmatched) == ["n2"]
    (found,) = plan.unmatched["n2"]
    assert found.text == (
        "n2:mlx5_1/1 is not an active InfiniBand port there, so ib_write_bw could not measure it against n1:mlx5_1/1"
    )
    assert (found.scope, found.port, found.culprits) == ("port", "mlx5_1/1", ("n2",))


def _result(role, node, peer, out="", err="", code=0, **kw):
    return WriteResult(role, node, peer, "mlx5_0", "1", 18515, ("ib_write_bw",), code, out, err, 1.0, **kw)


def _writes(client_out, client_err="", code=0, **kw):
    return {
        "n1": NodeWrites("n1", True, results=(_result("server", "n1", "n2"),), timeout_s=60, connect_wait_s=60),
        "n2": NodeWrites(
            "n2",
            True,
            results=(_result("client", "n2", "n1", client_out, client_err, code, **kw),),
            timeout_s=60,
            connect_wait_s=60,
        ),
    }


PLAN = judging.plan_steps([("n1", "n2")], {"n1": TWO_PORTS[:1], "n2": TWO_PORTS[:1]})


def test_healthy_pair_is_within_the_h100_line_for_both_nodes(h100):
    for node, way in (("n1", "from n2:mlx5_0/1"), ("n2", "to n1:mlx5_0/1")):
        found = judging.judge_node(node, PLAN, _writes(HEALTHY), job_id="77")
        assert found.problems == () and found.not_applicable == ""
        (m,) = found.measurements
        peer = "n2" if node == "n1" else "n1"
        assert (m.nodes, m.culprits, m.value, m.unit, m.job_id) == ((node, peer), (), 392.37, "Gb/s", "77")
        assert m.detail == f"{node}:mlx5_0/1 ib_write_bw {way}, 8 MiB messages"
        assert judge(m, h100[m.metric]).status == "pass"


def test_slow_hca_fails_naming_node_hca_peer_value_and_line(h100):
    line = h100[judging.METRIC].fail_below
    (m,) = judging.judge_node("n2", PLAN, _writes(HALF), fail_below=line).measurements
    verdict = judge(m, h100[m.metric])
    assert verdict.sentence.startswith(
        "n2+n1: ib_write_bw.per_hca (n2:mlx5_0/1 ib_write_bw to n1:mlx5_0/1, 8 MiB messages) = 187.5 Gb/s "
        "is below the fail line 380 Gb/s"
    )
    found = verdict.finding()
    # one pair alone cannot tell which HCA is slow: the pair together, no culprit
    assert found is not None and (found.scope, found.nodes, found.culprits) == ("nodes", ("n2", "n1"), ())


def test_the_odd_node_out_isolates_a_slow_hca_with_its_second_peer():
    # n1 meets n2 and n3; n1's mlx5_0 is fast with n2 and slow with n3: n3's mlx5_0 is the culprit.
    def client(node, peer, out):
        return _result("client", node, peer, out)

    writes = {
        "n1": NodeWrites("n1", True, results=(client("n1", "n2", HEALTHY), client("n1", "n3", HALF))),
        "n2": NodeWrites("n2", True, results=(client("n2", "n1", HEALTHY),)),
        "n3": NodeWrites("n3", True, results=(client("n3", "n1", HALF),)),
    }
    assert judging.isolated(writes, 380.0) == {"mlx5_0/1": ("n3",)}
    assert judging.isolated(writes, None) == {}
    plan = judging.plan_steps(judging.pairs_for(["n1", "n2", "n3"]), {n: TWO_PORTS[:1] for n in ("n1", "n2", "n3")})
    slow = [m for m in judging.judge_node("n1", plan, writes, fail_below=380.0).measurements if m.value < 380]
    assert [(m.nodes, m.culprits) for m in slow] == [(("n1", "n3"), ("n3",)), (("n1", "n3"), ("n3",))]


def test_a_client_that_never_reached_its_server_is_a_problem_naming_both():
    found = judging.judge_node("n1", PLAN, _writes("", NO_SERVER, code=1, attempts=60))
    assert found.measurements == ()
    (problem,) = found.problems
    assert (problem.scope, problem.nodes, problem.culprits) == ("nodes", ("n2", "n1"), ())
    assert problem.text.startswith(
        "n2:mlx5_0/1: ib_write_bw to n1:mlx5_0/1: exited 1 after 60 attempts in 1 s without a bandwidth "
        "(Couldn't connect"
    )


def test_absent_binary_is_not_applicable_for_the_node_and_its_peer(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    ctx = local_context()
    absent = ib_write_bw.run_pairs(ctx, steps={})
    assert absent is not None and not absent.found and absent.absent == "not on PATH"
    writes = {"n1": NodeWrites("n1", False, "not on PATH"), "n2": NodeWrites("n2", True, results=())}
    assert judging.judge_node("n1", PLAN, writes).not_applicable == (
        "ib_write_bw (perftest) is not installed on n1: not on PATH"
    )
    assert judging.judge_node("n2", PLAN, writes).not_applicable == "ib_write_bw is not installed on n2's peer n1"


def test_no_active_port_in_common_is_not_applicable():
    plan = judging.plan_steps([("n1", "n2")], {"n1": TWO_PORTS, "n2": []})
    assert judging.judge_node("n1", plan, {}).not_applicable == (
        "n1 has no active InfiniBand port in common with its peer n2"
    )
    assert judging.judge_node("n3", plan, {}).not_applicable == "n3 has no peer to pair with"


@pytest.mark.skipif(not find_tool("ib_write_bw", None, "ib_write_bw_path")[0], reason="perftest is not installed here")
def test_the_real_tool_without_a_device_is_a_problem_for_both_sides():
    """Run where perftest is installed and no RDMA device exists: both sides end at once."""
    ctx = local_context()
    node = ctx.hostnames[0]
    hcas = (Hca("mlx5_0", "1", 18599),)
    steps = {node: [Step("server", "localhost", hcas), Step("client", "localhost", hcas)]}
    writes = ib_write_bw.run_pairs(ctx, steps=steps, timeout_s=20, connect_wait_s=5)
    assert writes is not None and writes.found and len(writes.results) == 2
    assert all(r.returncode not in (0, None) and not r.timed_out for r in writes.results)
    assert "Unable to find the Infiniband/RoCE device" in writes.results[1].stderr + writes.results[1].stdout


def _stand_in(tmp_path: Path) -> str:
    """An executable standing in for ib_write_bw that never ends on its own."""
    path = tmp_path / "ib_write_bw"
    path.write_text("#!/bin/sh\nexec sleep 30\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def test_a_server_whose_client_never_comes_is_killed(tmp_path):
    ctx = local_context()
    node = ctx.hostnames[0]
    steps = {node: [Step("server", "n2", (Hca("mlx5_0", "1", 18515),))]}
    writes = ib_write_bw.run_pairs(ctx, steps=steps, path=_stand_in(tmp_path), timeout_s=0.5, connect_wait_s=0.5)
    assert writes is not None
    (served,) = writes.results
    assert served.timed_out and served.returncode is None and served.seconds < 10
    plan = judging.PairPlan(((node, "n2"),), steps)
    (problem,) = judging.judge_node(node, plan, {node: writes}).problems
    assert (
        problem.text
        == f"{node}:mlx5_0/1: ib_write_bw server for n2: no client connected within 0.5 s; the server was killed"
    )
    assert (problem.nodes, problem.culprits) == ((node, "n2"), ())


def test_a_client_past_its_timeout_is_killed_and_named(tmp_path):
    ctx = local_context()
    node = ctx.hostnames[0]
    steps = {node: [Step("client", "n1", (Hca("mlx5_0", "1", 18515),))]}
    writes = ib_write_bw.run_pairs(ctx, steps=steps, path=_stand_in(tmp_path), timeout_s=0.5, connect_wait_s=5)
    assert writes is not None
    plan = judging.PairPlan(((node, "n1"),), steps)
    (problem,) = judging.judge_node(node, plan, {node: writes}).problems
    assert problem.text == f"{node}:mlx5_0/1: ib_write_bw to n1:mlx5_0/1: still running at its timeout; killed"

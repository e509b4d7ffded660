"""Bad-node isolation by pairing, against simulated clusters: a pair passes when both nodes are good."""

from __future__ import annotations

import pytest

from pytest_gpucluster.checks.pairing import Pairing, isolate


def _cluster(n: int, bad: set[str]):
    nodes = [f"n{i}" for i in range(n)]
    jobs: list[list[tuple[str, str]]] = []

    def run_round(pairs):
        jobs.append(list(pairs))
        used = [x for p in pairs for x in p]
        assert len(used) == len(set(used)), f"pairs of one round must be disjoint: {pairs}"
        return {p: not (set(p) & bad) for p in pairs}

    return nodes, run_round, jobs


@pytest.mark.parametrize("n", [2, 3, 4, 5, 8, 9, 16, 17])
def test_healthy_cluster_clears_everyone_in_one_or_two_rounds(n):
    nodes, run_round, jobs = _cluster(n, set())
    found = isolate(nodes, run_round)
    assert set(found.good) == set(nodes)
    assert found.bad == found.undetermined == ()
    assert len(jobs) == (1 if n % 2 == 0 else 2)  # the odd node out waits for a cleared partner


@pytest.mark.parametrize(
    ("n", "bad"),
    [(4, "n0"), (4, "n3"), (5, "n4"), (5, "n2"), (3, "n2"), (3, "n0"), (8, "n5"), (16, "n11"), (17, "n16")],
)
def test_one_bad_node_is_named(n, bad):
    nodes, run_round, jobs = _cluster(n, {bad})
    found = isolate(nodes, run_round)
    assert found.bad == (bad,)
    assert found.undetermined == ()
    assert set(found.good) == set(nodes) - {bad}
    assert len(jobs) <= 3
    assert bad in found.summary()


@pytest.mark.parametrize(
    ("n", "bad"), [(4, {"n0", "n1"}), (4, {"n0", "n2"}), (5, {"n1", "n4"}), (8, {"n2", "n7"}), (6, {"n2", "n3"})]
)
def test_two_bad_nodes_are_named(n, bad):
    nodes, run_round, _ = _cluster(n, bad)
    found = isolate(nodes, run_round)
    assert set(found.bad) == bad
    assert set(found.good) == set(nodes) - bad
    assert found.undetermined == ()


def test_two_bad_nodes_of_four_in_the_same_pair_are_named():
    # (n0,n1) fails, (n2,n3) passes: both of the failed pair meet a known-good partner
    nodes, run_round, jobs = _cluster(4, {"n0", "n1"})
    found = isolate(nodes, run_round)
    assert found.bad == ("n0", "n1")
    assert jobs[1] == [("n0", "n2"), ("n1", "n3")]


@pytest.mark.parametrize("n", [2, 3, 4, 5])
def test_all_bad_clears_nobody_and_says_it_cannot_isolate(n):
    nodes, run_round, _ = _cluster(n, {f"n{i}" for i in range(n)})
    found = isolate(nodes, run_round)
    assert found.good == ()
    assert found.bad == ()  # nobody is convicted without a known-good partner
    assert set(found.undetermined) == set(nodes)
    assert "could not isolate" in found.summary()


def test_two_nodes_one_bad_cannot_tell_which():
    nodes, run_round, jobs = _cluster(2, {"n1"})
    found = isolate(nodes, run_round)
    assert found.undetermined == ("n0", "n1")
    assert len(jobs) == 1  # no other partner exists; no pointless second round
    assert "with two nodes a failed pair cannot tell which node is bad" in found.summary()


def test_pairs_never_repeat_and_rounds_are_bounded():
    nodes, run_round, jobs = _cluster(9, {f"n{i}" for i in range(9)})
    isolate(nodes, run_round, max_rounds=3)
    assert len(jobs) <= 3
    tried = [frozenset(p) for rnd in jobs for p in rnd]
    assert len(tried) == len(set(tried))


def test_summary_lists_every_round():
    nodes, run_round, _ = _cluster(4, {"n2"})
    summary = isolate(nodes, run_round).summary()
    assert "round 1: n0+n1 ok, n2+n3 FAIL" in summary
    assert "bad node(s): n2" in summary


def test_repeated_node_names_are_refused():
    with pytest.raises(ValueError, match="repeat"):
        Pairing(["a", "a"])


@pytest.mark.parametrize("n", [64, 256, 1024])
def test_one_slow_node_of_many_is_named_in_two_jobs(n):
    # Round 1: n/2 pairs at once; round 2: the failed pair's two nodes, each with a cleared partner.
    bad = f"n{n // 3}"
    nodes, run_round, jobs = _cluster(n, {bad})
    found = isolate(nodes, run_round)
    assert found.bad == (bad,)
    assert len(found.good) == n - 1
    assert [len(rnd) for rnd in jobs] == [n // 2, 2]

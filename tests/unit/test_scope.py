"""The nodes a run may test inside a reservation and with a constraint's features, from Slurm's
answers recorded on the project's test cluster (Slurm 22.05.8; tests/data/README.md): a
``flags=maint`` reservation over node1 and node2 (both ``IDLE`` with ``MAINTENANCE, RESERVED``
flags), one not yet started, and node features ib,h100 on node1 and h100 on node2."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_gpucluster import slurm
from pytest_gpucluster.config import Profile, features
from pytest_gpucluster.errors import ConfigError, SlurmQueryError
from pytest_gpucluster.run import nodes as nodes_module
from pytest_gpucluster.run.nodes import NodeSet
from pytest_gpucluster.slurm.reservation import parse_reservation

DATA = Path(__file__).parents[1] / "data" / "slurm"


@pytest.fixture
def slurm_says(monkeypatch):
    """``slurm_says(sinfo="file.json")``: Slurm answers the node listing and ``scontrol show
    reservation`` with recordings (each reservation by its name)."""

    def use(sinfo: str, **reservations: str) -> list[list[str]]:
        calls: list[list[str]] = []

        def recorded(argv, timeout_s):
            calls.append(argv)
            if argv == ["sinfo", "--json"]:
                return (DATA / sinfo).read_text()
            if argv[:4] == ["scontrol", "-o", "show", "reservation"]:
                name = argv[4] if len(argv) > 4 else ""
                text = (DATA / reservations.get(name, "scontrol-22.05-show-reservation-unknown.txt")).read_text()
                if "not found" in text:
                    raise SlurmQueryError(f"`{' '.join(argv)}` exited 1: {text.strip()}")
                return text
            raise AssertionError(argv)

        monkeypatch.setattr(slurm.commands, "_run_once", recorded)
        return calls

    return use


def _profile(**kw) -> Profile:
    return Profile("p", executor="slurm", partition="debug", **{"nodes": 2, "gpus_per_node": 4, **kw})


def test_a_maint_reservation_is_read_from_scontrols_line():
    res = parse_reservation((DATA / "scontrol-22.05-show-reservation-maint.txt").read_text())
    assert res is not None
    assert (res.name, res.nodes, res.state, res.flags) == (
        "gcmaint",
        ("node1", "node2"),
        "ACTIVE",
        ("MAINT", "SPEC_NODES"),
    )
    assert res.users == ("root", "gcop1") and res.accounts == ()
    assert not res.refuses("gcop1") and res.refuses("gcop2")
    assert parse_reservation((DATA / "scontrol-22.05-show-reservation-none.txt").read_text()) is None


def test_outside_its_reservation_a_maintenance_node_is_left_out(slurm_says):
    slurm_says("sinfo-22.05-maint-reservation.json")
    ns = NodeSet(_profile())
    assert ns.nodes == ("node3", "node4")
    assert ns.excluded == {"node1": "IDLE+MAINTENANCE+RESERVED", "node2": "IDLE+MAINTENANCE+RESERVED"}


def test_inside_its_reservation_the_run_tests_its_nodes_and_maintenance_is_no_fault(slurm_says):
    calls = slurm_says("sinfo-22.05-maint-reservation.json", gcmaint="scontrol-22.05-show-reservation-maint.txt")
    ns = NodeSet(_profile(reservation="gcmaint"), check_named=True)
    assert ns.nodes == ("node1", "node2") and ns.excluded == {}
    assert ns.reserved == {"node1", "node2"} and ns.candidates == ("node1", "node2")
    assert ["scontrol", "-o", "show", "reservation", "gcmaint"] in calls
    found = slurm.nodes(ns.client)
    assert (
        slurm.node_state_findings(found, partition="debug", expected=2, nodelist=ns.candidates, reserved=ns.reserved)
        == []
    )


def test_an_unknown_reservation_is_a_usage_error_naming_it(slurm_says):
    slurm_says("sinfo-22.05-maint-reservation.json", **{"": "scontrol-22.05-show-reservation-none.txt"})
    with pytest.raises(ConfigError) as err:
        NodeSet(_profile(reservation="nosuch"), check_named=True, reservation_from="--gpucluster-reservation")
    assert str(err.value) == (
        "--gpucluster-reservation=nosuch: Slurm holds no reservation 'nosuch' (reservations: none); name one that "
        "`scontrol show reservation` lists."
    )


def test_a_reservation_not_yet_started_is_a_usage_error(slurm_says):
    slurm_says("sinfo-22.05-maint-reservation.json", gclater="scontrol-22.05-show-reservation-inactive.txt")
    with pytest.raises(
        ConfigError, match=r"profiles.p.reservation: reservation 'gclater' is INACTIVE \(it starts 2026"
    ):
        NodeSet(_profile(reservation="gclater", nodes=1), check_named=True)


def test_a_reservation_that_does_not_admit_this_user_is_a_usage_error(slurm_says, monkeypatch):
    slurm_says("sinfo-22.05-maint-reservation.json", gcmaint="scontrol-22.05-show-reservation-maint.txt")
    monkeypatch.setattr(nodes_module, "user_name", lambda: "gcop2")
    with pytest.raises(ConfigError, match=r"reservation 'gcmaint' admits users root,gcop1, not gcop2; add the user"):
        NodeSet(_profile(reservation="gcmaint"), check_named=True)


def test_a_reservation_with_fewer_nodes_than_the_profile_tests_is_a_usage_error(slurm_says):
    slurm_says("sinfo-22.05-maint-reservation.json", gcmaint="scontrol-22.05-show-reservation-maint.txt")
    with pytest.raises(ConfigError) as err:
        NodeSet(_profile(reservation="gcmaint", nodes=3), check_named=True)
    assert str(err.value).startswith(
        "profiles.p.reservation=gcmaint: partition 'debug' in reservation 'gcmaint' holds only node[1-2]; "
        "profile 'p' tests 3. Name a reservation over the nodes to hand over"
    )


def test_named_nodes_outside_the_reservation_are_a_usage_error(slurm_says):
    slurm_says("sinfo-22.05-maint-reservation.json", gcmaint="scontrol-22.05-show-reservation-maint.txt")
    with pytest.raises(ConfigError, match=r"node3 is not in reservation 'gcmaint', named for this run"):
        NodeSet(_profile(reservation="gcmaint", nodes=2, nodelist=("node2", "node3")), check_named=True)


def test_the_constraints_features_pick_the_nodes(slurm_says):
    slurm_says("sinfo-22.05-features.json")
    assert NodeSet(_profile(constraint="h100"), check_named=True).nodes == ("node1", "node2")
    assert NodeSet(_profile(constraint="ib|h100", nodes=1), check_named=True).nodes == ("node1",)
    assert NodeSet(_profile(constraint="(ib&h100)|[a100|v100]", nodes=1), check_named=True).candidates == ("node1",)


def test_a_constraint_no_node_satisfies_is_a_usage_error_naming_it(slurm_says):
    slurm_says("sinfo-22.05-features.json")
    with pytest.raises(ConfigError) as err:
        NodeSet(_profile(constraint="a100"), check_named=True)
    assert str(err.value) == (
        "profiles.p.constraint=a100: partition 'debug' with features 'a100' holds no node; profile 'p' tests 2. "
        "Name features the nodes have (sinfo -N -o '%N %f'), or test fewer nodes."
    )
    with pytest.raises(ConfigError, match=r"node2 has features h100, named for this run; .* holds node1\."):
        NodeSet(_profile(constraint="ib&h100", nodelist=("node1", "node2")), check_named=True)


def test_constraints_are_read_as_slurm_writes_them():
    assert features.satisfies("ib&h100", {"ib", "h100"}) and not features.satisfies("ib&h100", {"h100"})
    assert features.satisfies("a|b&c", {"a"}) and features.satisfies("a|b&c", {"b", "c"})
    assert features.satisfies("[rack1|rack2]&gpu", {"rack2", "gpu"})
    for bad, said in (
        ("ib*2", "a count cannot be judged node by node"),
        ("!ib", "a negation cannot be judged"),
        ("ib&", "ends where a feature name should follow"),
        ("(ib|h100", "'(' is never closed"),
        ("ib)", "')' is out of place"),
        ("", "names no feature"),
    ):
        with pytest.raises(ValueError, match=said.replace("(", r"\(").replace(")", r"\)").replace("*", r"\*")):
            features.parse(bad)

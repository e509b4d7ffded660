"""Whether this user may drain nodes, told before any job from Slurm's answers recorded on the
test cluster (Slurm 22.05.8, SlurmUser root, accounting through slurmdbd; tests/data/README.md),
and what ``--gpucluster-drain-failed`` records where the user may not: the sentence, for every
rejected node, with no drain tried. The verdict is never touched here."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_gpucluster import slurm
from pytest_gpucluster.errors import SlurmQueryError
from pytest_gpucluster.results import codec
from pytest_gpucluster.results.drain import drain_rejected
from pytest_gpucluster.slurm import rights

DATA = Path(__file__).parents[1] / "data" / "slurm"
CONFIG = (DATA / "scontrol-22.05-show-config.txt").read_text()
REFUSED = (DATA / "scontrol-22.05-update-drain-unprivileged.stderr.txt").read_text().strip()
NEEDED = (
    "Slurm lets only root, its SlurmUser (root) and users whose AdminLevel in accounting is Operator or "
    "Administrator change a node's state"
)


@pytest.fixture
def answers(monkeypatch):
    """``answers(sacctmgr="file")``: scontrol show config and sacctmgr answer with recordings."""

    def use(sacctmgr: str | None = None, config: str | None = CONFIG) -> list[list[str]]:
        calls: list[list[str]] = []

        def recorded(argv, timeout_s):
            calls.append(argv)
            if argv[0] == "scontrol" and config is not None:
                return config
            if argv[0] == "sacctmgr" and sacctmgr is not None:
                return (DATA / sacctmgr).read_text()
            raise SlurmQueryError(f"`{' '.join(argv)}` exited 1: Unable to contact slurm controller (connect failure)")

        monkeypatch.setattr(slurm.commands, "_run_once", recorded)
        return calls

    return use


def test_the_config_names_the_slurm_user_and_the_accounting():
    config = rights.parse_config(CONFIG)
    assert rights.parse_slurm_user(config["SlurmUser"]) == ("root", 0)
    assert config["AccountingStorageType"] == "accounting_storage/slurmdbd"


def test_root_may_drain_and_accounting_is_not_asked(answers):
    calls = answers()
    assert rights.drain_right("root", 0) == rights.DrainRight(True)
    assert [c[0] for c in calls] == ["scontrol"]


def test_a_user_accounting_does_not_know_may_not_and_is_told_so_in_one_sentence(answers):
    calls = answers(sacctmgr="sacctmgr-22.05-show-user-unknown.txt")
    right = rights.drain_right("gcop1", 1001)
    assert right.allowed is False
    assert right.sentence == (
        f"gcop1 may not drain nodes: {NEEDED}, and gcop1 has no record in accounting; REJECTED nodes are named, not "
        "drained (`sacctmgr modify user gcop1 set adminlevel=Operator` gives the right)."
    )
    assert calls[-1] == ["sacctmgr", "-n", "-P", "show", "user", "gcop1", "format=user,adminlevel"]


def test_a_user_of_admin_level_none_may_not(answers):
    answers(sacctmgr="sacctmgr-22.05-show-user-none.txt")
    right = rights.drain_right("gcop1", 1001)
    assert right.allowed is False and "gcop1 has AdminLevel None" in right.sentence


def test_an_administrator_may(answers):
    answers(sacctmgr="sacctmgr-22.05-show-user-root.txt")
    assert rights.drain_right("root", 1001).allowed is True  # root by name, uid aside


def test_where_slurm_cannot_tell_the_right_needed_is_kept_for_the_end(answers):
    answers(config=None)
    assert rights.drain_right("gcop1", 1001) == rights.DrainRight(None, rights.right_needed())


NODES = {"verdicts": {"node1": {"verdict": "ACCEPTED"}, "node2": {"verdict": "REJECTED", "reasons": ["node2: x"]}}}


def test_a_user_without_the_right_is_not_tried_and_each_rejected_node_says_why():
    tried = []
    right = rights.DrainRight(False, "gcop1 may not drain nodes: ...")
    out = drain_rejected(codec.decode_nodes(NODES), executor="slurm", drain=lambda n, r: tried.append(n), right=right)
    assert out == {"node2": {"error": "gcop1 may not drain nodes: ..."}} and tried == []


def test_a_refusal_slurm_could_not_foretell_names_the_right_needed():
    def refused(node, reason):
        raise SlurmQueryError(f"`scontrol update nodename={node} state=drain reason=...` exited 1: {REFUSED}")

    right = rights.DrainRight(None, rights.right_needed("root"))
    out = drain_rejected(codec.decode_nodes(NODES), executor="slurm", drain=refused, right=right)
    assert out["node2"]["error"].endswith(f"exited 1: slurm_update error: Invalid user id ({NEEDED})")

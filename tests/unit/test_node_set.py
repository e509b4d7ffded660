"""The nodes a run tests, from Slurm's node list as recorded on the project's test cluster
(slurm-wlm 22.05.8, two nodes of 4 GRES GPUs, ``sinfo --json``): healthy, node2 drained, and
node2 told it has no GPUs (``gpuless_nodes``, no gres.conf line for it)."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_gpucluster import slurm
from pytest_gpucluster.config import Profile
from pytest_gpucluster.run.nodes import NodeSet

DATA = Path(__file__).parents[1] / "data" / "slurm"
HIDDEN = "offering 0 GPU(s) (Gres=none), fewer than the 4 the profile expects"


@pytest.fixture
def sinfo(monkeypatch):
    """``sinfo("file.json")``: Slurm's node list answers with that recording."""

    def use(name: str) -> None:
        text = (DATA / name).read_text()

        def recorded(argv, timeout_s):
            assert argv == ["sinfo", "--json"]
            return text

        monkeypatch.setattr(slurm.commands, "_run_once", recorded)

    return use


def _profile(**kw) -> Profile:
    return Profile("p", executor="slurm", partition="debug", **{"nodes": 2, "gpus_per_node": 4, **kw})


def test_a_node_whose_gres_offers_fewer_gpus_is_left_out_and_the_other_runs(sinfo):
    sinfo("sinfo-22.05-node2-gres-hidden.json")
    nodes = NodeSet(_profile())
    assert nodes.nodes == ("node1",)
    assert nodes.excluded == {"node2": HIDDEN}


def test_a_short_node_the_run_does_not_need_is_a_spare_one_and_is_left_alone(sinfo):
    # One node wanted, one with the GPUs: node2 may be a CPU node of a mixed partition.
    sinfo("sinfo-22.05-node2-gres-hidden.json")
    nodes = NodeSet(_profile(nodes=1))
    assert nodes.nodes == ("node1",) and nodes.excluded == {}


def test_a_named_node_short_of_gpus_is_left_out_too(sinfo):
    sinfo("sinfo-22.05-node2-gres-hidden.json")
    nodes = NodeSet(_profile(nodelist=["node1", "node2"]))
    assert nodes.nodes == ("node1",) and nodes.excluded == {"node2": HIDDEN}


def test_when_no_node_has_the_gpus_every_node_stays_and_its_jobs_say_so(sinfo):
    # Leaving every node out would skip every check: the refused jobs reject the run instead,
    # naming each node's Gres, and the GPU-less checks still read the nodes.
    sinfo("sinfo-22.05-node2-gres-hidden.json")
    nodes = NodeSet(_profile(gpus_per_node=8))
    assert nodes.nodes == ("node1", "node2") and nodes.excluded == {}


def test_no_stated_gpu_count_leaves_no_node_out_for_its_gres(sinfo):
    sinfo("sinfo-22.05-node2-gres-hidden.json")
    assert NodeSet(_profile(gpus_per_node=None)).nodes == ("node1", "node2")


def test_a_drained_node_is_left_out_with_slurms_state_and_reason(sinfo):
    sinfo("sinfo-22.05-node2-drained.json")
    nodes = NodeSet(_profile())
    assert nodes.nodes == ("node1",)
    assert nodes.excluded == {"node2": "IDLE+DRAIN (integration test)"}

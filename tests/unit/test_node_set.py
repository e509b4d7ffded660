"""The nodes a run tests, from Slurm's node list as recorded on the project's test cluster
(slurm-wlm 22.05.8, two nodes of 4 GRES GPUs, ``sinfo --json``): healthy, node2 drained, and
node2 told it has no GPUs (``gpuless_nodes``, no gres.conf line for it)."""

from __future__ import annotations

import shutil
import time
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


# A run that submits nothing (a dry run): the listed nodes' states are asked once, within a bound.


def test_a_dry_run_names_the_nodes_slurm_leaves_out_and_where_their_states_came_from(sinfo):
    sinfo("sinfo-22.05-node2-drained.json")
    nodes = NodeSet(_profile(nodelist=["node1", "node2"]), states_bound_s=5.0)
    assert nodes.plan_lines() == [
        "nodes: 1 from the profile's nodelist (node1), their states read from `sinfo --json`",
        "  left out: node2: IDLE+DRAIN (integration test)",
    ]


def test_a_dry_run_without_slurm_says_whose_states_are_unknown_and_what_the_plan_assumes(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))  # no Slurm client on this login node
    nodes = NodeSet(_profile(nodes=3, nodelist=["gpu01", "gpu02", "gpu03"]), states_bound_s=5.0)
    assert nodes.nodes == ("gpu01", "gpu02", "gpu03")
    first, then = nodes.plan_lines()
    assert first == (
        "nodes: 3 from the profile's nodelist, their states unknown (gpu[01-03]): Slurm's word on them could not "
        "be read: `sinfo` is not on PATH; is slurm-client installed on this login node?"
    )
    assert then.startswith("  the plan takes each as usable; a run leaves out any Slurm holds drained, down")


def test_a_dry_run_of_a_partition_without_slurm_says_it_has_no_node(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    nodes = NodeSet(_profile(), states_bound_s=5.0)
    assert nodes.nodes == ()
    assert nodes.plan_lines()[0].startswith(
        "nodes: none; the profile lists none and Slurm's nodes of partition 'debug' could not be read: `sinfo`"
    )


def test_a_dry_run_waits_once_and_within_its_bound_for_a_slurm_that_does_not_answer(monkeypatch):
    # Without its configuration file Slurm's client keeps trying to read it for a minute; the
    # bound cuts that, once, for the check of the named nodes and the node list together.
    if shutil.which("sinfo") is None:
        pytest.skip("no Slurm client on this machine")
    monkeypatch.setenv("SLURM_CONF", "/nonexistent/slurm.conf")
    t0 = time.monotonic()
    nodes = NodeSet(_profile(nodelist=["gpu1", "gpu2"]), named=["gpu1"], check_named=True, states_bound_s=2.0)
    assert nodes.nodes == ("gpu1",)
    took = time.monotonic() - t0
    assert 2.0 <= took < 4.0, took
    assert nodes.states_unread == "`sinfo --json` did not answer within 2 s."
    assert nodes.plan_lines()[0].startswith("nodes: 1 from --gpucluster-nodes, their states unknown (gpu1)")

"""Output paths and earlier results checked before any job (``options.py``)."""

from __future__ import annotations

import pytest

from pytest_gpucluster.config.options import merge_belongs, writable_file
from pytest_gpucluster.errors import ConfigError


def test_a_writable_path_is_returned_absolute_and_nothing_is_left_behind(tmp_path):
    assert writable_file("--gpucluster-results", "r.json", base=tmp_path) == tmp_path / "r.json"
    assert writable_file("--gpucluster-results", "a/b/r.json", base=tmp_path) == tmp_path / "a" / "b" / "r.json"
    assert list(tmp_path.iterdir()) == []  # the probe is gone, no folder was made


@pytest.mark.parametrize(
    ("value", "said"),
    [
        (
            "/proc/x/r.json",
            "--gpucluster-results=/proc/x/r.json: cannot write in /proc, where its folder /proc/x would be made",
        ),
        ("/proc/version/r.json", "--gpucluster-results=/proc/version/r.json: /proc/version is not a folder"),
        ("/proc", "--gpucluster-results=/proc: /proc is a folder; name a file in it."),
    ],
)
def test_an_unwritable_path_is_refused_naming_option_and_value(value, said):
    with pytest.raises(ConfigError) as err:
        writable_file("--gpucluster-results", value)
    assert str(err.value).startswith(said)


def _doc(profile="ci", executor="slurm", nodes=("node1", "node2"), excluded=()):
    return {
        "profile": profile,
        "cluster": {"profile": profile, "executor": executor},
        "nodes": list(nodes),
        "environment": {"excluded_nodes": {n: "DRAIN (bad DIMM)" for n in excluded}},
        "acceptance": {"nodes": {"verdicts": {n: {"verdict": "ACCEPTED"} for n in nodes}}},
    }


def test_a_merge_with_the_run_of_the_same_cluster_passes():
    merge_belongs(
        _doc(excluded=("node3",)), "--gpucluster-merge-results=a.json", profile="ci", executor="slurm", nodes=["node3"]
    )


@pytest.mark.parametrize(
    ("doc", "nodes", "said"),
    [
        (_doc("local", "local", ("vm",)), ["node2"], "a run of profile 'local' (executor local, nodes: vm); this run"),
        (_doc(), ["node2", "node9"], "node9 was not in that run (its nodes: node1, node2)"),
        (_doc(executor="local"), ["node2"], "that run used the local executor; this one the slurm executor"),
    ],
)
def test_a_merge_with_another_cluster_is_refused_saying_what_differs(doc, nodes, said):
    with pytest.raises(ConfigError) as err:
        merge_belongs(doc, "--gpucluster-merge-results=a.json", profile="ci", executor="slurm", nodes=nodes)
    assert str(err.value).startswith("--gpucluster-merge-results=a.json: ") and said in str(err.value)

"""Slurm's switch tree read from topology.conf and from `scontrol show topology` output (topology/tree
and topology/block), and a profile's topology_file checked when thresholds.toml is loaded."""

from __future__ import annotations

import itertools
import textwrap
from pathlib import Path

import pytest

from pytest_gpucluster.config import load
from pytest_gpucluster.config.topology import TopologyError, parse_topology, read_topology
from pytest_gpucluster.errors import ConfigError
from pytest_gpucluster.plan.rounds import plan_rounds
from pytest_gpucluster.slurm.topology import topology_of_output

DATA = Path(__file__).resolve().parents[1] / "data" / "topology"


def test_scontrol_output_of_a_two_level_tree_with_uneven_leaves_and_a_one_node_leaf():
    tree = read_topology(DATA / "scontrol-22.05-show-topology-2level_representative_sample.txt")
    assert tree.levels == 2
    assert [(leaf.name, len(leaf.nodes)) for leaf in tree.leaves] == [
        ("leaf1", 16),
        ("leaf2", 16),
        ("leaf3", 11),
        ("leaf4", 1),
    ]
    assert tree.leaves[3].nodes == ("gpu-044",)
    assert tree.switches["spine1"].children == ("leaf1", "leaf2", "leaf3", "leaf4")
    assert len(tree.switches["spine1"].nodes) == 44
    assert tree.leaf_of()["gpu-017"] == "leaf2"
    assert {leaf.parent for leaf in tree.leaves} == {"spine1"}


def test_topology_conf_of_three_levels_with_comments():
    tree = read_topology(DATA / "topology-3level_representative_sample.conf")
    assert tree.levels == 3
    assert [leaf.name for leaf in tree.leaves] == ["leafa1", "leafa2", "leafa3", "leafb1", "leafb2"]
    assert tree.ancestors("leafb2") == ("spineb", "core")
    assert tree.switches["core"].level == 2
    assert tree.leaves[2].nodes[-1] == "node0023"


def test_scontrol_output_of_three_levels_agrees_with_its_levels():
    tree = read_topology(DATA / "scontrol-23.11-show-topology-3level_representative_sample.txt")
    assert tree.levels == 3
    assert tree.switches["ib-core"].children == ("ib-spine-01", "ib-spine-02")
    assert tree.ancestors("ib-leaf-03") == ("ib-spine-02", "ib-core")


def test_keys_are_read_without_regard_to_case_and_lines_continue():
    tree = parse_topology("switchname=l1 nodes=n[1-2]\nSwitchName=s \\\n  Switches=l1\n")
    assert tree.switches["s"].children == ("l1",)
    assert tree.switches["s"].line == 2


@pytest.mark.parametrize(
    ("text", "line", "key", "says"),
    [
        ("SwitchName=l1 Nodes=n[1-2]\nSwitchName=l2 Node=n3\n", 2, "Node", "Perhaps you meant 'Nodes'"),
        ("SwitchName=l1 Nodes=n[1-2]\nNodes=n3\n", 2, "SwitchName", "must name its switch"),
        ("SwitchName=l1 Nodes=n[1-2]\nSwitchName=l1 Nodes=n3\n", 2, "SwitchName", "named again (first on line 1)"),
        ("SwitchName=l1 Nodes=n[1-2]\nSwitchName=l2 Nodes=n[2-3]\n", 2, "Nodes", "already under leaf 'l1'"),
        ("SwitchName=l1 Nodes=n[3-1]\n", 1, "Nodes", "counts down"),
        ("SwitchName=s Switches=l[1-2]\nSwitchName=l1 Nodes=n1\n", 1, "Switches", "'l2', which no line declares"),
        (
            "SwitchName=l1 Nodes=n1\nSwitchName=a Switches=l1\nSwitchName=b Switches=l1\n",
            3,
            "Switches",
            "already under 'a'",
        ),
        ("SwitchName=a Switches=b\nSwitchName=b Switches=a\n", 1, "Switches", "loop: a → b → a"),
        ("SwitchName=l1 Level=1 Nodes=n1\n", 1, "Level", "put it at level 0"),
        ("SwitchName=l1 Nodes=n1\nSwitchName=s Nodes=n[1-2] Switches=l1\n", 2, "Nodes", "not under its switches: n2"),
        ("SwitchName=l1 LinkSpeed=1\n", 1, "Nodes", "neither Nodes nor Switches"),
        ("SwitchName=l1 Nodes\n", 1, "Nodes", "is not KEY=VALUE"),
    ],
)
def test_a_bad_line_is_named_by_its_number_and_key(text, line, key, says):
    with pytest.raises(TopologyError) as info:
        parse_topology(text)
    assert (info.value.line, info.value.key) == (line, key)
    assert says in str(info.value)


def test_an_empty_text_names_no_switch():
    with pytest.raises(TopologyError, match="names no switch"):
        parse_topology("# nothing here\n\n")


PROFILE = """
[profiles.big]
executor = "slurm"
nodes = 4
gpus_per_node = 8
{extra}

[thresholds.default]
"gpu.temperature" = {{ unit = "C", fail_above = 85, warn_above = 75 }}
"""


def _write(tmp_path: Path, extra: str) -> Path:
    path = tmp_path / "thresholds.toml"
    path.write_text(textwrap.dedent(PROFILE.format(extra=extra)))
    return path


def test_a_profile_reads_its_topology_file_relative_to_thresholds_toml(tmp_path):
    (tmp_path / "topo").mkdir()
    (tmp_path / "topo" / "tree.conf").write_text((DATA / "topology-one-spine_representative_sample.conf").read_text())
    profile = load(_write(tmp_path, 'topology_file = "topo/tree.conf"')).profiles["big"]
    assert profile.topology is not None
    assert len(profile.topology.leaves) == 4
    assert profile.topology_file == str(tmp_path / "topo" / "tree.conf")


def test_a_profile_without_topology_file_has_no_tree(tmp_path):
    assert load(_write(tmp_path, "")).profiles["big"].topology is None


def test_a_missing_topology_file_names_the_key_and_the_file(tmp_path):
    path = _write(tmp_path, 'topology_file = "nope.conf"')
    with pytest.raises(ConfigError) as info:
        load(path)
    assert str(info.value) == f"{path}: profiles.big.topology_file: {tmp_path / 'nope.conf'}: no such file."


def test_a_bad_topology_file_names_the_file_the_line_and_the_key(tmp_path):
    (tmp_path / "tree.conf").write_text("SwitchName=l1 Nodes=n[1-4]\nSwitchName=s Switchs=l1\n")
    path = _write(tmp_path, 'topology_file = "tree.conf"')
    with pytest.raises(ConfigError) as info:
        load(path)
    message = str(info.value)
    assert message.startswith(f"{path}: profiles.big.topology_file: {tmp_path / 'tree.conf'}: line 2, Switchs: ")
    assert "Perhaps you meant 'Switches'?" in message


def test_the_tree_itself_is_not_a_key_of_the_file(tmp_path):
    with pytest.raises(ConfigError, match=r"profiles.big.topology: unknown key. Perhaps you meant 'topology_file'\?"):
        load(_write(tmp_path, 'topology = "x"'))


def test_a_line_scontrol_cut_short_says_how_to_save_it_whole():
    with pytest.raises(TopologyError, match="SLURM_TOPO_LEN=65536"):
        parse_topology("SwitchName=l1 Level=0 LinkSpeed=1 Nodes=n[001-016],m[001-0")


def test_a_topology_error_in_thresholds_toml_ends_in_one_stop(tmp_path):
    (tmp_path / "tree.conf").write_text("SwitchName=l1 Nodes=n[1-4]\nSwitchName=s Switchs=l1\n")
    with pytest.raises(ConfigError) as info:
        load(_write(tmp_path, 'topology_file = "tree.conf"'))
    assert str(info.value).endswith("Perhaps you meant 'Switches'?")
    (tmp_path / "tree.conf").write_text("SwitchName=l1 Nodes=n[1-4]\nSwitchName=l1 Nodes=n5\n")
    with pytest.raises(ConfigError) as info:
        load(_write(tmp_path, 'topology_file = "tree.conf"'))
    assert str(info.value).endswith("line 2, SwitchName: switch 'l1' is named again (first on line 1).")


# --------------------------------------------------------------------------- topology/block


def test_scontrol_output_of_blocks_reads_blocks_as_leaves_under_their_aggregates():
    topology = read_topology(DATA / "scontrol-24.11-show-topology-block_representative_sample.txt")
    assert topology.plugin == "block"
    assert [(leaf.name, len(leaf.nodes)) for leaf in topology.leaves] == [(f"nvl{i}", 18) for i in range(1, 5)]
    assert topology.ancestors("nvl3") == ("nvl[3-4]", "nvl[1-4]")
    assert topology.switches["nvl[1-4]"].children == ("nvl[1-2]", "nvl[3-4]")
    assert topology.levels == 3
    assert topology.leaf_of()["gb200-019"] == "nvl2"


def test_topology_conf_of_blocks_with_block_sizes():
    topology = read_topology(DATA / "topology-block_representative_sample.conf")
    assert topology.plugin == "block" and topology.levels == 1
    assert [len(leaf.nodes) for leaf in topology.leaves] == [18, 18, 18, 16]
    assert all(leaf.parent is None for leaf in topology.leaves)


def test_blocks_plan_rounds_like_leaves():
    topology = read_topology(DATA / "scontrol-24.11-show-topology-block_representative_sample.txt")
    plan = plan_rounds([n for leaf in topology.leaves for n in leaf.nodes], topology)
    assert [r.stage for r in plan.rounds].count("between leaves") == 3
    assert {frozenset(g.leaves) for r in plan.stage("between leaves") for g in r.groups} == {
        frozenset(pair) for pair in itertools.combinations(("nvl1", "nvl2", "nvl3", "nvl4"), 2)
    }


@pytest.mark.parametrize(
    ("text", "line", "key", "says"),
    [
        ("BlockName=b1 Nodes=n[1-2]\nSwitchName=s1 Nodes=n[3-4]", 2, "SwitchName", "one topology plugin"),
        ("BlockName=b1 Nodes=n[1-2]\nBlockName=b1 Nodes=n[3-4]", 2, "BlockName", "named again"),
        ("BlockName=b1 Nodes=n[1-2]\nBlockName=b2 Nodes=n[2-3]", 2, "Nodes", "already in block 'b1'"),
        ("BlockName=b1 Nodes=n[1-2]\nAggregatedBlock=b[1-2] Nodes=n[1-4]", 2, "Nodes", "no block within it: n3"),
        ("BlockName=b1 Nodes=n[1-2] BlockIndex=x", 1, "BlockIndex", "whole number"),
        ("BlockName=b1 Nodes=n[1-2]\nBlockSizes=2,four", 2, "BlockSizes", "whole numbers"),
        ("BlockName=b1\n", 1, "Nodes", "names no Nodes"),
        ("BlockNam=b1 Nodes=n1", 1, "BlockNam", "Perhaps you meant 'BlockName'?"),
    ],
)
def test_a_bad_block_line_is_named_by_its_number_and_key(text, line, key, says):
    with pytest.raises(TopologyError) as caught:
        parse_topology(text)
    assert (caught.value.line, caught.value.key) == (line, key)
    assert says in str(caught.value)


def test_slurm_without_a_topology_plugin_prints_nothing_and_has_no_tree():
    # Slurm 22.05 with TopologyPlugin=topology/none: no line on stdout, the error on stderr.
    assert topology_of_output("") is None and topology_of_output("\n") is None
    text = (DATA / "scontrol-24.11-show-topology-block_representative_sample.txt").read_text()
    found = topology_of_output(text)
    assert found is not None and found.plugin == "block"


def test_groups_at_once_is_read_from_nccl_across_and_refused_below_one(tmp_path):
    profile = load(_write(tmp_path, "[profiles.big.nccl_across]\ngroups_at_once = 8")).profiles["big"]
    assert profile.nccl_across.groups_at_once == 8
    with pytest.raises(ConfigError, match=r"nccl_across.groups_at_once.*at least 1 group a job; got 0"):
        load(_write(tmp_path, "[profiles.big.nccl_across]\ngroups_at_once = 0"))

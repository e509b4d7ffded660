"""The switch tree or the blocks Slurm itself knows: ``scontrol show topology`` read into the
``Topology`` a profile's ``topology_file`` gives (``config/topology.py``). Slurm without a topology
plugin (topology/none, topology/default, topology/flat) prints no line and says so on stderr:
then there is no tree, and the across-node check pairs nodes as before."""

from __future__ import annotations

from dataclasses import dataclass

from pytest_gpucluster.config.topology import Topology, TopologyError, parse_topology
from pytest_gpucluster.errors import SlurmQueryError
from pytest_gpucluster.slurm.commands import Slurm

# scontrol cuts each line at SLURM_TOPO_LEN characters where it is set (512 in some versions when
# it is not): set it high, so no long hostlist of a switch or block ends early.
WHOLE_LINES = {"SLURM_TOPO_LEN": "1048576"}


SHOW_TOPOLOGY = ["scontrol", "show", "topology"]


def slurm_topology(client: Slurm) -> Topology | None:
    """Slurm's topology from ``scontrol show topology``, asked through the run's client (its
    timeout and retry window); None where Slurm has none. A text that cannot be read raises
    ``TopologyError`` naming the line and key."""
    return topology_of_output(client.run(SHOW_TOPOLOGY, env=WHOLE_LINES))


@dataclass(frozen=True)
class TreeSource:
    """The switch tree a run's rounds follow, and a sentence for the dry run (``where``) saying
    where it came from or why there is none."""

    tree: Topology | None
    where: str


def tree_source(profile_tree: Topology | None, *, on_slurm: bool, client: Slurm) -> TreeSource:
    """The profile's ``topology_file`` where it names one; else, on Slurm, Slurm's own tree. A
    Slurm that cannot answer or whose answer cannot be read gives no tree, and the sentence says
    why, so that a dry run plans as the run would and shows the reason."""
    if profile_tree is not None:
        return TreeSource(profile_tree, "switch tree from the profile's topology_file")
    if not on_slurm:
        return TreeSource(
            None, "no switch tree: the profile names no topology_file, and the local executor has no Slurm to ask"
        )
    try:
        tree = slurm_topology(client)
    except (SlurmQueryError, TopologyError) as exc:
        return TreeSource(
            None, f"no switch tree: the profile names no topology_file, and Slurm's could not be read: {exc}"
        )
    if tree is None:
        return TreeSource(
            None,
            "no switch tree: the profile names no topology_file, and `scontrol show topology` printed none",
        )
    return TreeSource(tree, "switch tree from `scontrol show topology` (the profile names no topology_file)")


def topology_of_output(text: str) -> Topology | None:
    """``scontrol show topology``'s stdout → ``Topology``; None for no line."""
    if not text.strip():
        return None
    return parse_topology(text)

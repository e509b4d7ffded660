"""The switch tree or the blocks Slurm itself knows: ``scontrol show topology`` read into the
``Topology`` a profile's ``topology_file`` gives (``config/topology.py``). Slurm without a topology
plugin (topology/none, topology/default, topology/flat) prints no line and says so on stderr:
then there is no tree, and the across-node check pairs nodes as before."""

from __future__ import annotations

from pytest_gpucluster.config.topology import Topology, parse_topology
from pytest_gpucluster.slurm import commands

# scontrol cuts each line at SLURM_TOPO_LEN characters where it is set (512 in some versions when
# it is not): set it high, so no long hostlist of a switch or block ends early.
WHOLE_LINES = {"SLURM_TOPO_LEN": "1048576"}


def slurm_topology() -> Topology | None:
    """Slurm's topology from ``scontrol show topology``; None where Slurm has none. A text that
    cannot be read raises ``TopologyError`` naming the line and key."""
    return topology_of_output(commands.ask_once(["scontrol", "show", "topology"], env=WHOLE_LINES))


def topology_of_output(text: str) -> Topology | None:
    """``scontrol show topology``'s stdout → ``Topology``; None for no line."""
    if not text.strip():
        return None
    return parse_topology(text)

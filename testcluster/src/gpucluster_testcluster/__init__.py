"""A real multi-node Slurm cluster on one machine, for this project's own tests.

``python -m gpucluster_testcluster up`` starts munged, MariaDB,
slurmdbd, slurmctld and one slurmd per node, each node in its own network and
UTS namespace; see docs/testcluster.md. Only the standard library is used, so
the module also runs under a bare system Python on the GPU machine.
"""

from __future__ import annotations

from .cluster import TestCluster
from .config import (
    CLUSTER_NAME,
    DEFAULT_SHARED_DIR,
    DEFAULT_STATE_DIR,
    PARTITION,
)
from .proc import ClusterError
from .state import ClusterInfo, NodeState

__all__ = [
    "CLUSTER_NAME",
    "DEFAULT_SHARED_DIR",
    "DEFAULT_STATE_DIR",
    "PARTITION",
    "ClusterError",
    "ClusterInfo",
    "NodeState",
    "TestCluster",
]

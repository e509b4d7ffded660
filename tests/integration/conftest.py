"""Fixtures for the project's own integration tests (real Slurm test cluster)."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from pytest_gpucluster.testcluster import ClusterInfo, TestCluster


@pytest.fixture(scope="session")
def slurm_cluster() -> Iterator[ClusterInfo]:
    """The local multi-node Slurm cluster, started once per session.

    A healthy cluster that is already running (e.g. from
    ``python -m pytest_gpucluster.testcluster up``) is reused and left running;
    one started here is torn down at the end of the session.
    """
    if os.geteuid() != 0:
        pytest.skip("the Slurm test cluster needs root")
    running = TestCluster.from_running()
    if running is not None and running.nodes >= 2 and running.gpus_per_node >= 4:
        yield running.info()
        return
    cluster = TestCluster()
    info = cluster.up()
    try:
        yield info
    finally:
        cluster.down()

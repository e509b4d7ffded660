"""Fixtures for the project's own integration tests (real Slurm test cluster)."""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from handover_support import outcome

from gpucluster_testcluster import ClusterInfo, TestCluster, config

# One test cluster per machine: sessions that use it (the self-tests, tools/prove-* runs wrapped in
# flock(1) on this file) take turns. The wait is bounded; a holder past it is named by the message.
CLUSTER_LOCK = Path("/tmp/gpucluster-testcluster.lock")
CLUSTER_LOCK_WAIT_S = 1800.0


@pytest.fixture(scope="session", autouse=True)
def cluster_lock() -> Iterator[None]:
    """Hold the test cluster's lock for the whole session (bounded wait for another holder): every
    integration test uses the one cluster or brings up clusters of its own on this machine."""
    with CLUSTER_LOCK.open("a") as handle:
        deadline = time.monotonic() + CLUSTER_LOCK_WAIT_S
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    pytest.fail(
                        f"{CLUSTER_LOCK} is still held after {CLUSTER_LOCK_WAIT_S:.0f} s by another user of the "
                        "test cluster (fuser -v shows which process); do not wrap the self-tests in flock(1)",
                        pytrace=False,
                    )
                time.sleep(2)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


@pytest.fixture(scope="session")
def slurm_cluster(cluster_lock: None) -> Iterator[ClusterInfo]:
    """The local multi-node Slurm cluster, started once per session.

    A healthy cluster that is already running (e.g. from
    ``python -m gpucluster_testcluster up``) is reused and left running;
    one started here is torn down at the end of the session.
    """
    if os.geteuid() != 0:
        pytest.skip("the Slurm test cluster needs root")
    running = TestCluster.from_running()
    if running is None and (config.DEFAULT_STATE_DIR / "cluster.json").exists():
        # A cluster runs but is unhealthy for now: a fault-injection test has drained or killed
        # node3/node4 and restores them within a minute. Wait rather than restart it under the
        # other tests using it.
        deadline = time.monotonic() + 90
        while running is None and time.monotonic() < deadline:
            time.sleep(2)
            running = TestCluster.from_running()
    if running is not None and running.nodes >= 4 and running.gpus_per_node >= 4:
        yield running.info()
        return
    # Four nodes: the ci profile tests node1 and node2; fault-injection tests drain or kill node3
    # and node4, so the other checks are not disturbed.
    cluster = TestCluster(nodes=4)
    info = cluster.up()
    try:
        yield info
    finally:
        cluster.down()


REPO = Path(__file__).resolve().parents[2]


@dataclass
class AcceptanceRun:
    """One run of the acceptance suite as an operator would start it, and what it wrote."""

    returncode: int
    output: str
    results: dict[str, Any]

    def outcome(self, name_part: str) -> str:
        """The outcome of the single test whose id contains ``name_part``."""
        return outcome(self.results, name_part)


@pytest.fixture
def run_acceptance(slurm_cluster: ClusterInfo, tmp_path: Path) -> Callable[..., AcceptanceRun]:
    """``run_acceptance("tests/acceptance/test_x.py", "--cluster=ci", ...)``: a real pytest process
    against the real Slurm test cluster, bounded in time, with its results file parsed."""

    def run(*args: str, timeout_s: float = 600) -> AcceptanceRun:
        results = tmp_path / f"results-{len(list(tmp_path.glob('results-*')))}.json"
        argv = [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "-rA",
            f"--gpucluster-results={results}",
            *args,
        ]
        if not any(a.startswith("--cluster") for a in args):
            argv.append("--cluster=ci")
        env = {**os.environ, "SLURM_CONF": slurm_cluster.slurm_conf}
        proc = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout_s, check=False)
        document = json.loads(results.read_text()) if results.exists() else {"tests": []}
        return AcceptanceRun(proc.returncode, proc.stdout + proc.stderr, document)

    return run

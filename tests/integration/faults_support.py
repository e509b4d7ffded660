"""Helpers of the fault-injection tests: a temporary profile pinned to node3/node4 (the ``ci``
profile tests node1/node2, which stay undisturbed), the jobs it left in the queue, and a real
pytest process run the way an operator runs the suite."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpucluster_testcluster import ClusterInfo, TestCluster, daemons
from gpucluster_testcluster.config import Paths
from gpucluster_testcluster.proc import alive_from_pid_file

REPO = Path(__file__).resolve().parents[2]
FAULT_NODES = ("node3", "node4")
SLURM_CONF = "/var/lib/gpucluster-testcluster/etc/slurm.conf"
SHARED = "/srv/gpucluster-ci/shared"


def toml_value(value: Any) -> str:
    """A Python value as TOML (strings JSON-quoted, which TOML accepts)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{json.dumps(k)} = {toml_value(v)}" for k, v in value.items()) + " }"
    if isinstance(value, str):
        return json.dumps(value)
    return repr(value)


@dataclass
class FaultProfile:
    """A thresholds file: the repository's one plus ``[profiles.faults]``; ``tag`` is the
    sbatch comment of every job it submits, so a test finds exactly its own jobs."""

    path: Path
    tag: str

    def jobs(self) -> list[dict[str, str]]:
        """This profile's jobs still in the queue."""
        out = slurm_cmd("squeue", "-h", "-o", "%i|%T|%N|%j|%k|%r")
        keys = ("id", "state", "nodes", "name", "comment", "reason")
        rows = [dict(zip(keys, line.split("|", 5), strict=False)) for line in out.splitlines() if line.count("|") >= 5]
        return [r for r in rows if r["comment"].strip() == self.tag]

    def cancel_all(self) -> None:
        """Cleanup of last resort: scancel this profile's jobs (only these)."""
        ids = [j["id"] for j in self.jobs()]
        if ids:
            slurm_cmd("scancel", *ids)


def fault_profile(tmp_path: Path, name: str = "faults", extra_text: str = "", **overrides: Any) -> FaultProfile:
    """Write thresholds.toml with a profile on node3/node4 and short time limits."""
    tag = f"faults-{uuid.uuid4().hex[:10]}"
    settings: dict[str, Any] = {
        "executor": "slurm",
        "partition": "debug",
        "nodes": 2,
        "nodelist": list(FAULT_NODES),
        "gpus_per_node": 4,
        "gpus_are_real": False,
        "shared_fs": SHARED,
        "slurm_conf": SLURM_CONF,
        "device_cgroups": False,
        "thresholds": "cpu",
        "queue_timeout_s": 10,
        "job_timeout_min": 1,
    }
    settings.update(overrides)
    extra = dict(settings.pop("sbatch_extra", {}))
    extra.setdefault("comment", tag)
    settings["sbatch_extra"] = extra
    lines = [f"\n[profiles.{name}]"] + [f"{k} = {toml_value(v)}" for k, v in settings.items() if v is not None]
    path = tmp_path / "thresholds.toml"
    path.write_text((REPO / "thresholds.toml").read_text() + "\n".join(lines) + "\n" + extra_text)
    return FaultProfile(path, tag)


def slurm_cmd(*argv: str, timeout: float = 30.0, check: bool = True) -> str:
    """A Slurm client command against the test cluster."""
    env = {**os.environ, "SLURM_CONF": SLURM_CONF}
    proc = subprocess.run(list(argv), env=env, capture_output=True, text=True, timeout=timeout, check=False)
    if check and proc.returncode != 0:
        raise AssertionError(f"{argv} exited {proc.returncode}: {proc.stderr.strip()}")
    return proc.stdout


def wait_until(what: str, predicate: Callable[[], Any], timeout: float, interval: float = 0.3) -> Any:
    """Poll ``predicate`` until it returns something true; AssertionError naming ``what`` after
    ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout:.0f} s")
        time.sleep(interval)


def remove_cgroup(group: Path, timeout: float = 30.0) -> None:
    """Remove a cgroup (v1) directory, waiting (bounded) while a job step is still ending inside it."""

    def removed() -> bool:
        try:
            group.rmdir()
        except OSError:
            return False
        return True

    wait_until(f"{group} removed", removed, timeout, interval=0.5)


def start_pytest(argv: list[str]) -> subprocess.Popen[str]:
    """A suite run in the background, from the repository, the way an operator's shell starts it:
    SIGINT at its default, so Python turns it into KeyboardInterrupt (a shell ignores SIGINT for
    what it starts with ``&``, and the run would inherit that from a self-test started so), and
    Python's fault handler on: a run that must be stopped for hanging dumps every thread's stack
    first (``finish``)."""
    env = {**os.environ, "SLURM_CONF": SLURM_CONF, "PYTHONFAULTHANDLER": "1"}
    return subprocess.Popen(
        argv,
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        preexec_fn=_sigint_default,
    )


def start_suite(profile: FaultProfile, tmp_path: Path, *args: str) -> tuple[subprocess.Popen[str], Path]:
    """``start_pytest`` on the fault profile with ``args``; the process and its results file (one
    of its own, so runs started side by side keep theirs)."""
    results = tmp_path / f"results-{uuid.uuid4().hex[:6]}.json"
    return start_pytest(pytest_argv(profile, results, *args)), results


def _sigint_default() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def finish(proc: subprocess.Popen[str], timeout: float) -> str:
    """Wait (bounded) for a run of ``start_pytest`` to end; its output. One still running after
    ``timeout`` gets SIGABRT, so the fault handler prints where each thread stood, and the
    AssertionError carries that."""
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGABRT)
        try:
            out, _ = proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, _ = proc.communicate()
        raise AssertionError(f"pytest still running {timeout:.0f} s later; its threads then:\n{out[-8000:]}") from None
    return out


@dataclass
class Run:
    """A finished pytest process and its results file."""

    returncode: int
    output: str
    results: dict[str, Any]
    seconds: float
    path: Path | None = None  # the results file

    def test(self, name_part: str) -> dict[str, Any]:
        """The one test whose node id contains ``name_part``."""
        found = [t for t in self.results.get("tests", []) if name_part in t["nodeid"]]
        assert len(found) == 1, f"{name_part!r} matches {[t['nodeid'] for t in found]}\n{self.output}"
        return found[0]


def pytest_argv(profile: FaultProfile, results: Path, *args: str) -> list[str]:
    """A pytest command line the way an operator runs the suite, on the fault profile."""
    return [
        sys.executable,
        "-m",
        "pytest",
        "-p",
        "no:cacheprovider",
        "-rA",
        "--cluster=faults",
        f"--gpucluster-thresholds={profile.path}",
        f"--gpucluster-results={results}",
        *args,
    ]


def run_pytest(profile: FaultProfile, tmp_path: Path, *args: str, timeout: float = 300.0) -> Run:
    """Run pytest to its end (bounded) and read its results file."""
    results = tmp_path / f"results-{uuid.uuid4().hex[:6]}.json"
    env = {**os.environ, "SLURM_CONF": SLURM_CONF}
    t0 = time.monotonic()
    proc = subprocess.run(
        pytest_argv(profile, results, *args),
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    doc = json.loads(results.read_text()) if results.exists() else {}
    return Run(proc.returncode, proc.stdout + proc.stderr, doc, time.monotonic() - t0, results)


def cluster_handle(info: ClusterInfo) -> TestCluster:
    """A handle on the running test cluster, also while a node of it is down (``from_running``
    answers None then)."""
    return TestCluster.from_running(info.state_dir) or TestCluster(
        nodes=len(info.nodes), gpus_per_node=info.gpus_per_node, state_dir=info.state_dir, install=False
    )


def restore_nodes(info: ClusterInfo) -> None:
    """Undo every fault on node3/node4: restart a killed slurmd, resume a drained or down node."""
    cluster = cluster_handle(info)
    for node in FAULT_NODES:
        cluster.start_slurmd(node, wait=False)
    for node in FAULT_NODES:
        slurm_cmd("scontrol", "update", f"nodename={node}", "state=resume", check=False)

    def usable() -> bool:
        # Healthy and empty: a job Slurm requeued after the fault must be gone too, or the next
        # test's job queues behind it.
        busy = slurm_cmd("squeue", "-h", "-w", ",".join(FAULT_NODES), "-o", "%i", check=False).split()
        return not busy and all(n.healthy for n in cluster.node_states() if n.name in FAULT_NODES)

    wait_until("node3 and node4 usable and empty again", usable, 60)


def stop_controller(info: ClusterInfo) -> None:
    """Stop slurmctld (SIGTERM: it saves its state, as in a restart or a failover)."""
    paths = Paths(state_dir=info.state_dir, shared_dir=info.shared_dir)
    assert daemons.stop_pid_file(paths.slurmctld_pid, "slurmctld"), "slurmctld was not running"


def start_controller(info: ClusterInfo) -> None:
    """Start slurmctld again (bounded: until it answers ``scontrol ping``); a no-op when it runs."""
    paths = Paths(state_dir=info.state_dir, shared_dir=info.shared_dir)
    if alive_from_pid_file(paths.slurmctld_pid, "slurmctld") is None:
        daemons.start_slurmctld(paths)


LONG_TEST = """
from pytest_gpucluster.workloads.sleep import sleep


def test_long_job_on_every_node(gpucluster):
    gpucluster.run(sleep, gpucluster.spec("long", all_nodes=True, gpus_per_node=0), seconds={seconds})
"""


def write_long_test(tmp_path: Path, seconds: float = 120.0) -> Path:
    """A test that holds node3 and node4 with one sleeping job."""
    path = tmp_path / "test_long_job.py"
    path.write_text(LONG_TEST.format(seconds=seconds))
    return path

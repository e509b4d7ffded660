"""Whose fault it is, produced for real on node3/node4 of the test cluster: a node whose shared
directory is its own (node4), a network setting in the profile's env that no node has, another
user's job holding one node for the whole run. Each is named as what it is, from the findings'
fields: only a node's own fault rejects it, and no node is excluded for the configuration or the
queue; each run ends within about one queue timeout of a clean one."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from faults_support import SHARED, SLURM_CONF, fault_profile, restore_nodes, run_pytest, slurm_cmd, wait_until

from gpucluster_testcluster.config import Paths

pytestmark = pytest.mark.integration

ACCEPTANCE = Path("tests/acceptance")
SELECTION = (
    str(ACCEPTANCE / "test_sharedfs.py"),
    str(ACCEPTANCE / "test_placement.py"),
    str(ACCEPTANCE / "test_rank_failure.py"),
)
FOREIGN_USER = "gcbob"


def _verdicts(run) -> dict[str, str]:
    return {n: v["verdict"] for n, v in run.results["acceptance"]["nodes"]["verdicts"].items()}


@pytest.fixture
def node4_private_shared(slurm_cluster) -> Iterator[None]:
    """node4 sees an empty tmpfs where the shared filesystem is: mounted in its slurmd's own mount
    namespace (every job on node4 runs in it), the other nodes and the login node untouched."""
    paths = Paths(state_dir=slurm_cluster.state_dir, shared_dir=slurm_cluster.shared_dir)
    pid = paths.slurmd_pid("node4").read_text().strip()
    enter = ["nsenter", "-t", pid, "-m"]
    subprocess.run([*enter, "mount", "-t", "tmpfs", "-o", "size=16m", "gcprivate", SHARED], check=True, timeout=30)
    try:
        yield
    finally:
        subprocess.run([*enter, "umount", SHARED], check=False, timeout=30)
        restore_nodes(slurm_cluster)


def test_a_node_whose_shared_directory_is_its_own_is_named_for_it_and_its_partner_is_not(
    slurm_cluster, tmp_path, node4_private_shared
):
    profile = fault_profile(tmp_path, queue_timeout_s=20)
    try:
        # The inventory's comparison of each node with the others runs after node4 is lost; the
        # fabric's before job, over every node, is where node4 is first found silent.
        inventory, fabric = str(ACCEPTANCE / "test_inventory.py"), str(ACCEPTANCE / "test_fabric.py")
        run = run_pytest(profile, tmp_path, *SELECTION, inventory, fabric, timeout=300)
    finally:
        profile.cancel_all()
    acc = run.results["acceptance"]
    # node4's fault is its own; node3, its partner in every job across nodes, is not rejected for it.
    assert _verdicts(run) == {"node3": "PARTIAL", "node4": "REJECTED"}, acc["nodes"]
    assert acc["nodes"]["exclude"] == "node4" and acc["nodes"]["cluster_wide"] == []
    reasons = " ".join(acc["nodes"]["verdicts"]["node4"]["reasons"])
    assert "does not see the shared filesystem" in reasons or "folder on the shared filesystem" in reasons, reasons
    visibility = run.test("test_mounted_everywhere_as_one_filesystem")
    assert [f["culprits"] for f in visibility["findings"] if f["severity"] == "fail"] == [["node4"]], visibility
    # node3 compared with the others, when node4 is lost: nothing to judge it by, never its failure.
    matches = run.test("test_node_matches_the_others[node3]")
    assert matches["verdict"] == "n/a" and "node3 has no other node left to be judged with" in matches["message"]
    # node3's own fabric counters are judged on what node3 read, not failed for node4 lost under the job.
    counters = run.test("test_fabric_error_counters_did_not_rise[node3]")
    assert counters["verdict"] in ("pass", "n/a"), counters
    assert run.seconds < 150, f"took {run.seconds:.0f} s"


def test_a_network_setting_no_node_has_is_the_configurations_fault_and_excludes_no_node(slurm_cluster, tmp_path):
    profile = fault_profile(tmp_path, env={"GLOO_SOCKET_IFNAME": "ib9"})
    try:
        run = run_pytest(profile, tmp_path, *SELECTION, timeout=300)
    finally:
        profile.cancel_all()
    acc = run.results["acceptance"]
    setting = "GLOO_SOCKET_IFNAME=ib9 (from the profile's env) matches nothing on node[3-4], which offer eth0, lo"
    assert acc["verdict"] == "INCOMPLETE" and acc["headline"].startswith(f"INCOMPLETE: {setting}"), acc["headline"]
    assert sum(setting in r for r in acc["reasons"]) == 1, acc["reasons"]  # one finding, said once
    assert acc["nodes"]["exclude"] == "" and "REJECTED" not in _verdicts(run).values()
    found = {(f["scope"], f["setting"]) for t in run.results["tests"] for f in t["findings"]}
    assert ("config", "GLOO_SOCKET_IFNAME") in found
    assert run.returncode == 10, run.output
    assert "not judged" in run.output.splitlines()[-1], run.output.splitlines()[-1]  # pytest's count line


@pytest.fixture
def foreign_job_on_node4(slurm_cluster) -> Iterator[str]:
    """Another user's exclusive job holding node4 for longer than the run."""
    subprocess.run(["useradd", "-M", "-s", "/usr/sbin/nologin", FOREIGN_USER], check=False, capture_output=True)
    env = {**os.environ, "SLURM_CONF": SLURM_CONF}
    argv = ["sbatch", "--parsable", "--exclusive", "-w", "node4", "-J", "bobs-training", "-p", "debug"]
    argv += ["--chdir=/tmp", "--output=/dev/null", "--time=10", "--wrap", "sleep 600"]
    sent = subprocess.run(
        ["runuser", "-u", FOREIGN_USER, "--", *argv], env=env, capture_output=True, text=True, timeout=30, check=True
    )
    job = sent.stdout.strip().split(";")[0]
    wait_until("bob's job running on node4", lambda: "RUNNING" in slurm_cmd("squeue", "-h", "-j", job, "-o", "%T"), 30)
    try:
        yield job
    finally:
        slurm_cmd("scancel", job, check=False)
        restore_nodes(slurm_cluster)


def test_another_users_job_holding_a_node_is_learned_once_and_the_other_node_is_tested(
    slurm_cluster, tmp_path, foreign_job_on_node4
):
    profile = fault_profile(tmp_path, queue_timeout_s=15)
    try:
        run = run_pytest(profile, tmp_path, *SELECTION, timeout=300)
    finally:
        profile.cancel_all()
    acc = run.results["acceptance"]
    held = f"other work held node4 past queue_timeout_s (15 s): job {foreign_job_on_node4} of {FOREIGN_USER}"
    assert acc["verdict"] == "INCOMPLETE" and acc["headline"].startswith(f"INCOMPLETE: {held}"), acc["headline"]
    # The held node is not judged; the other one was tested in full: nothing waited on node4 again.
    assert _verdicts(run) == {"node3": "PARTIAL", "node4": "INCOMPLETE"}, acc["nodes"]
    assert acc["nodes"]["exclude"] == ""
    assert run.results["environment"]["held_nodes"] == {
        "node4": f"job {foreign_job_on_node4} of {FOREIGN_USER} (bobs-training), RUNNING on node4"
    }
    assert run.returncode == 10, run.output
    assert run.seconds < 15 + 120, f"took {run.seconds:.0f} s"


def test_another_users_job_holding_the_only_node_leaves_every_check_not_judged(
    slurm_cluster, tmp_path, foreign_job_on_node4
):
    profile = fault_profile(tmp_path, queue_timeout_s=10, nodes=1, nodelist=["node4"])
    try:
        run = run_pytest(profile, tmp_path, *SELECTION, timeout=300)
    finally:
        profile.cancel_all()
    acc = run.results["acceptance"]
    held = f"other work held node4 past queue_timeout_s (10 s): job {foreign_job_on_node4} of {FOREIGN_USER}"
    assert acc["verdict"] == "INCOMPLETE" and acc["headline"].startswith(f"INCOMPLETE: {held}"), acc["headline"]
    # Checks of every node together have no node left to run on: not judged for the holder, never failed.
    assert acc["counts"]["fail"] == 0 and _verdicts(run) == {"node4": "INCOMPLETE"}, (acc["counts"], acc["reasons"])
    assert "no usable node" not in run.output
    assert run.returncode == 10 and run.seconds < 10 + 120, (run.returncode, run.seconds)

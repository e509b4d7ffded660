"""The SDC, fabric and vendor-tool checks of the acceptance suite, run through the local executor
on this machine: the SDC chain passes on the CPU stand-in; the fabric check is not applicable
without InfiniBand or NVLink, fails naming the port when a fatal counter of a recorded sysfs tree
moves between the two snapshots, warns where the profile loosens that family, and is not
applicable on an xdist worker; nvbandwidth and ib_write_bw
are planned where they apply and not applicable, with the reason, without the tools."""

from __future__ import annotations

import json
import re
import shutil
import socket
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
ACCEPTANCE = REPO / "tests" / "acceptance"
RECORDED = REPO / "tests" / "data" / "fabric" / "before"
# Runs before the fabric check whatever the file order: once the before snapshot (started ahead)
# has ended, one counter moves, as a link that went down and came back under traffic makes it.
TRAFFIC = """
from pathlib import Path


def test_traffic(gpucluster):
    assert not gpucluster.runner.await_ahead()
    Path({path!r}).write_text("1\\n")
"""


@pytest.fixture
def checks(gpc: pytest.Pytester) -> pytest.Pytester:
    for name in ("test_sdc.py", "test_fabric.py"):
        shutil.copy(ACCEPTANCE / name, gpc.path / name)
    return gpc


def _tests(path: Path) -> dict[str, dict]:
    doc = json.loads((path / "out.json").read_text())
    return {t["nodeid"].split("::")[-1].split("[")[0]: t for t in doc["tests"]}


def test_both_are_planned_sdc_passes_on_the_cpu_stand_in_and_fabric_is_not_applicable(checks):
    dry = checks.runpytest_subprocess("--cluster=local", "--gpucluster-dry-run")
    dry.stdout.fnmatch_lines_random(
        [
            "sdc: job of its own, when first needed; *",
            "fabric-before: job of its own, started ahead; *",
            "fabric-after: job of its own, after every other job (its tests run last); *",
        ]
    )
    checks.runpytest_subprocess("--cluster=local", "--gpucluster-results=out.json")
    tests = _tests(checks.path)
    sdc, fabric = tests["test_gpus_compute_bit_identical_results"], tests["test_fabric_error_counters_did_not_rise"]
    assert sdc["verdict"] == "pass", sdc
    assert fabric["verdict"] == "n/a", fabric
    assert "no InfiniBand port under /sys/class/infiniband" in fabric["message"]


def _moving_counter(checks: pytest.Pytester, tmp_path: Path, extra: str = "") -> None:
    """A ``fabric`` profile on a copy of the recorded sysfs tree, and a test that moves its
    mlx5_2 port 1 link_downed counter 0 → 1 between the two snapshots; ``extra``: more profile lines."""
    root = tmp_path / "infiniband"
    shutil.copytree(RECORDED, root)
    counter = root / "mlx5_2" / "ports" / "1" / "counters" / "link_downed"
    (checks.path / "test_zz_traffic.py").write_text(TRAFFIC.format(path=str(counter)))
    thresholds = checks.path / "thresholds.toml"
    profile = f'\n[profiles.fabric]\nextends = "local"\nfabric_sysfs_root = "{root}"\n' + extra
    thresholds.write_text(thresholds.read_text() + profile)


def test_a_counter_that_rose_between_the_snapshots_fails_naming_the_port(checks, tmp_path):
    _moving_counter(checks, tmp_path)
    result = checks.runpytest_subprocess(
        "test_fabric.py", "test_zz_traffic.py", "--cluster=fabric", "--gpucluster-results=out.json", "-v"
    )
    result.stdout.fnmatch_lines(["*test_traffic PASSED*", "*test_fabric_error_counters_did_not_rise*FAILED*"])
    fabric = _tests(checks.path)["test_fabric_error_counters_did_not_rise"]
    assert fabric["verdict"] == "fail", fabric
    first = r"Failed: \S+: InfiniBand link_downed \+1 on mlx5_2 port 1 over \d+ s \(fail > 0\)"
    assert re.match(first, fabric["message"]), fabric
    (detail,) = [f["detail"] for f in fabric["fabric"]["findings"] if f["subject"] == "link_downed"]
    assert detail == [{"where": "mlx5_2 port 1", "counter": "link_downed", "before": 0, "after": 1}]


def test_a_profile_loosens_the_family(checks, tmp_path):
    _moving_counter(checks, tmp_path, "[profiles.fabric.fabric.link_downed]\nfail_per_s = false\nwarn_per_s = 0\n")
    checks.runpytest_subprocess(
        "test_fabric.py", "test_zz_traffic.py", "--cluster=fabric", "--gpucluster-results=out.json"
    )
    fabric = _tests(checks.path)["test_fabric_error_counters_did_not_rise"]
    assert fabric["verdict"] == "warn", fabric
    assert any(
        "InfiniBand link_downed +1 on mlx5_2 port 1" in w and w.endswith("(warn > 0)") for w in fabric["warnings"]
    )
    # No GPU on this machine: NVLink is said not read, a warning, never a failure.
    assert any("NVLink error counters not read (not asked for" in w for w in fabric["warnings"]), fabric


def test_fabric_is_not_applicable_on_an_xdist_worker(checks):
    checks.runpytest_subprocess("test_fabric.py", "--cluster=local", "--gpucluster-results=out.json", "-n", "1")
    fabric = _tests(checks.path)["test_fabric_error_counters_did_not_rise"]
    assert fabric["verdict"] == "n/a", fabric
    assert "under xdist" in fabric["message"]


# ------------------------------------------------------------------ vendor tools

VENDOR_PROFILES = """
[profiles.twogpu]
extends = "local"
gpus_per_node = 2

[profiles.twonodes]
extends = "nebius"
nodelist = ["gpu-01", "gpu-02"]

[profiles.twogpu-named]
extends = "twogpu"
"""


@pytest.fixture
def vendor(gpc: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    for name in ("test_nvbandwidth.py", "test_ib_write_bw.py"):
        shutil.copy(ACCEPTANCE / name, gpc.path / name)
    thresholds = gpc.path / "thresholds.toml"
    thresholds.write_text(thresholds.read_text() + VENDOR_PROFILES)
    # Neither tool nor Slurm's commands on PATH: the dry run of a Slurm profile reads no partition.
    monkeypatch.setenv("PATH", str(Path(sys.executable).parent))
    return gpc


def test_vendor_tools_are_planned_where_they_apply(vendor):
    local = vendor.runpytest_subprocess("--cluster=twogpu", "--gpucluster-dry-run")
    local.stdout.fnmatch_lines(["nvbandwidth: job of its own, when first needed; *; read by 2 test(s)"])
    assert "ib-write-bw:" not in local.stdout.str()  # one node: not applicable, so not planned
    pairs = vendor.runpytest_subprocess("--cluster=twonodes", "--gpucluster-dry-run")
    pairs.stdout.fnmatch_lines_random(
        [
            "node-probe: job of its own, started ahead; *",
            "ib-write-bw: job of its own, when first needed; ib_write_bw between neighbour node pairs*; read by 2 *",
            "nvbandwidth: job of its own, when first needed; *; read by 4 test(s)",
        ]
    )


def test_vendor_tools_are_not_applicable_with_their_reason_without_the_tools(vendor):
    run = vendor.runpytest_subprocess("--cluster=twogpu", "--gpucluster-results=out.json")
    tests = _tests(vendor.path)
    host = socket.gethostname()
    for name in ("test_host_device_copies_per_gpu", "test_gpu_pairs_copy_per_gpu"):
        assert tests[name]["verdict"] == "n/a", tests[name]
        assert (
            f"nvbandwidth is not installed on {host}: not on PATH (the node probe's reading)" in tests[name]["message"]
        )
        # The node probe found no nvbandwidth on any node: no nvbandwidth job was submitted.
        assert [j["name"].split("-", 1)[1] for j in tests[name]["jobs"]] == ["node-probe"]
    ib = tests["test_ib_write_bw_per_hca"]
    assert ib["verdict"] == "n/a" and "profile 'twogpu' has 1 node; this check needs 2" in ib["message"]
    assert run.ret == 10, run.stdout.str()  # nothing was measured: INCOMPLETE


def test_a_named_nvbandwidth_path_that_is_not_there_is_named(vendor):
    thresholds = vendor.path / "thresholds.toml"
    thresholds.write_text(thresholds.read_text() + 'nvbandwidth_path = "/opt/nvbandwidth/nvbandwidth"\n')
    vendor.runpytest_subprocess("test_nvbandwidth.py", "--cluster=twogpu-named", "--gpucluster-results=out.json")
    found = _tests(vendor.path)["test_host_device_copies_per_gpu"]
    assert found["verdict"] == "n/a", found
    assert "no executable at /opt/nvbandwidth/nvbandwidth (profile key nvbandwidth_path)" in found["message"]
    # A named path is looked for by the job itself, on the node.
    assert "nvbandwidth" in [j["name"].split("-", 1)[1] for j in found["jobs"]]

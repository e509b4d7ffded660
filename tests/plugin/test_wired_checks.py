"""The SDC and fabric checks of the acceptance suite, run through the local executor on this
machine: the SDC chain passes on the CPU stand-in; the fabric check is not applicable without
InfiniBand or NVLink, fails naming the port when a recorded sysfs tree's counter moves between
the two snapshots, and is not applicable on an xdist worker."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
ACCEPTANCE = REPO / "tests" / "acceptance"
RECORDED = REPO / "tests" / "data" / "fabric" / "before"
# Runs before the fabric check whatever the file order: once the before snapshot (started ahead)
# has ended, one counter moves, as a link taking symbol errors under traffic would make it.
TRAFFIC = """
from pathlib import Path


def test_traffic(gpucluster):
    assert not gpucluster.runner.await_ahead()
    Path({path!r}).write_text("37\\n")
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
    dry = checks.runpytest_subprocess("--cluster=local", "--dry-run")
    dry.stdout.fnmatch_lines_random(
        [
            "sdc: job of its own, when first needed; *",
            "fabric-before: job of its own, started ahead; *",
            "fabric-after: job of its own, after every other job (its tests run last); *",
        ]
    )
    checks.runpytest_subprocess("--cluster=local", "--results=out.json")
    tests = _tests(checks.path)
    sdc, fabric = tests["test_gpus_compute_bit_identical_results"], tests["test_fabric_error_counters_did_not_rise"]
    assert sdc["verdict"] == "pass", sdc
    assert fabric["verdict"] == "n/a", fabric
    assert "no InfiniBand port under /sys/class/infiniband" in fabric["message"]


def test_a_counter_that_rose_between_the_snapshots_fails_naming_the_port(checks, tmp_path):
    root = tmp_path / "infiniband"
    shutil.copytree(RECORDED, root)
    counter = root / "mlx5_2" / "ports" / "1" / "counters" / "symbol_error"
    (checks.path / "test_zz_traffic.py").write_text(TRAFFIC.format(path=str(counter)))
    thresholds = checks.path / "thresholds.toml"
    profile = f'\n[profiles.fabric]\nextends = "local"\nfabric_sysfs_root = "{root}"\n'
    thresholds.write_text(thresholds.read_text() + profile)
    result = checks.runpytest_subprocess(
        "test_fabric.py", "test_zz_traffic.py", "--cluster=fabric", "--results=out.json", "-v"
    )
    result.stdout.fnmatch_lines(["*test_traffic PASSED*", "*test_fabric_error_counters_did_not_rise*FAILED*"])
    fabric = _tests(checks.path)["test_fabric_error_counters_did_not_rise"]
    assert fabric["verdict"] == "fail", fabric
    assert ":mlx5_2 port 1: symbol_error rose 0 → 37 (+37, at most +0 allowed)" in fabric["message"]


def test_a_bound_allows_the_rise(checks, tmp_path):
    root = tmp_path / "infiniband"
    shutil.copytree(RECORDED, root)
    counter = root / "mlx5_2" / "ports" / "1" / "counters" / "symbol_error"
    (checks.path / "test_zz_traffic.py").write_text(TRAFFIC.format(path=str(counter)))
    thresholds = checks.path / "thresholds.toml"
    profile = f'\n[profiles.fabric]\nextends = "local"\nfabric_sysfs_root = "{root}"\n'
    profile += "[profiles.fabric.fabric_bounds]\nsymbol_error = 40\n"
    thresholds.write_text(thresholds.read_text() + profile)
    checks.runpytest_subprocess("test_fabric.py", "test_zz_traffic.py", "--cluster=fabric", "--results=out.json")
    fabric = _tests(checks.path)["test_fabric_error_counters_did_not_rise"]
    assert fabric["verdict"] == "warn", fabric  # NVLink not read on this machine: said, not failed
    assert "symbol_error" not in fabric["message"]


def test_fabric_is_not_applicable_on_an_xdist_worker(checks):
    checks.runpytest_subprocess("test_fabric.py", "--cluster=local", "--results=out.json", "-n", "1")
    fabric = _tests(checks.path)["test_fabric_error_counters_did_not_rise"]
    assert fabric["verdict"] == "n/a", fabric
    assert "under xdist" in fabric["message"]

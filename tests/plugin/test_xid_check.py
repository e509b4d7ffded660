"""The Xid check of the acceptance suite through the local executor on this machine: not applicable
where the profile has no GPU devices, run last where it has, judged from the kernel log where this
machine lets the run read it (and not judged, never passed, where it does not), and not
applicable on an xdist worker."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
ONE_GPU = '\n[profiles.onegpu]\nextends = "local"\ngpus_per_node = 1\n'
# Collected before test_xid.py and run first whatever the order: the check still comes last.
EARLY = "def test_zz_early(gpucluster):\n    pass\n"


@pytest.fixture
def checks(gpc: pytest.Pytester) -> pytest.Pytester:
    shutil.copy(REPO / "tests" / "acceptance" / "test_xid.py", gpc.path / "test_xid.py")
    (gpc.path / "test_zz_early.py").write_text(EARLY)
    thresholds = gpc.path / "thresholds.toml"
    thresholds.write_text(thresholds.read_text() + ONE_GPU)
    return gpc


def _tests(path: Path) -> list[dict]:
    return json.loads((path / "out.json").read_text())["tests"]


def test_not_applicable_without_gpu_devices(checks):
    checks.runpytest_subprocess("test_xid.py", "--cluster=local", "--gpucluster-results=out.json")
    (xid,) = _tests(checks.path)
    if xid["verdict"] != "n/a":
        pytest.skip("this machine has GPUs: the local profile has them too")
    assert "this check needs 1" in xid["message"] and not xid["job_ids"]


def test_judged_from_the_kernel_log_after_every_other_test(checks):
    dry = checks.runpytest_subprocess("--cluster=onegpu", "--gpucluster-dry-run")
    dry.stdout.fnmatch_lines(["xid-kernel-log: job of its own, after every other job (its tests run last); *"])
    checks.runpytest_subprocess("--cluster=onegpu", "--gpucluster-results=out.json")
    tests = _tests(checks.path)
    assert [t["name"] for t in tests][-1] == "test_no_gpu_xid_errors", [t["nodeid"] for t in tests]
    xid = tests[-1]
    assert [j["name"].split("-", 1)[1] for j in xid["jobs"]] == ["xid-kernel-log"]
    readable = os.access("/dev/kmsg", os.R_OK) and _kmsg_opens()
    if readable:
        # No GPU job ran, so no NVML watch: the kernel log alone judges, and this machine logs no Xid.
        assert xid["verdict"] in ("pass", "warn"), xid
        # What judged it is in the results, beside the verdict.
        assert xid["xid"]["sources"]["kernel log"].endswith("Xid line(s) since boot"), xid["xid"]
    else:
        assert xid["verdict"] == "not_judged", xid
        assert "Xids not judged: kernel log not readable (/dev/kmsg: " in xid["message"]
        assert "no NVML watch (no GPU job of the run ran a task there)" in xid["message"]


def _kmsg_opens() -> bool:
    try:
        os.close(os.open("/dev/kmsg", os.O_RDONLY | os.O_NONBLOCK))
    except OSError:
        return False
    return True


def test_not_applicable_on_an_xdist_worker(checks):
    checks.runpytest_subprocess("test_xid.py", "--cluster=onegpu", "--gpucluster-results=out.json", "-n", "1")
    (xid,) = _tests(checks.path)
    assert xid["verdict"] == "n/a", xid
    assert "under xdist" in xid["message"]

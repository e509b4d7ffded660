"""Ctrl-C and SIGTERM of a running suite, for real: a pytest process on node3/node4 measures the
shared filesystem, then waits on a long job; the signal arrives while Slurm runs that job. The
process must exit within a bound, leave no job in the queue, and keep the earlier measurement
in a results file marked interrupted, with the HTML report written."""

from __future__ import annotations

import json
import signal
import time

import pytest
from faults_support import fault_profile, finish, pytest_argv, start_pytest, wait_until, write_long_test

pytestmark = pytest.mark.integration

MEASURE_FIRST = "tests/acceptance/test_sharedfs.py::test_capacity_and_free_space"


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_cancels_every_job_and_keeps_what_was_measured(slurm_cluster, tmp_path, sig):
    profile = fault_profile(tmp_path)
    results, html = tmp_path / "results.json", tmp_path / "acceptance.html"
    argv = pytest_argv(profile, results, MEASURE_FIRST, str(write_long_test(tmp_path, seconds=120)), f"--html={html}")
    proc = start_pytest(argv)
    try:

        def long_job_running() -> bool:
            assert proc.poll() is None, proc.communicate()[0]
            return any(j["state"] == "RUNNING" and j["name"].endswith("-long") for j in profile.jobs())

        wait_until("the long job RUNNING", long_job_running, 90)
        proc.send_signal(sig)
        t0 = time.monotonic()
        out = finish(proc, timeout=30)
        exited_after = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
        profile.cancel_all()
    assert proc.returncode == 2, out  # pytest's INTERRUPTED
    assert exited_after < 15, f"exited {exited_after:.1f} s after {sig.name}"
    assert "KeyboardInterrupt" in out
    # Cancelled, not waited out: gone from the queue within Slurm's KillWait.
    wait_until("the run's jobs to leave the queue", lambda: profile.jobs() == [], 15)
    doc = json.loads(results.read_text())
    assert doc["status"] == "interrupted"
    assert doc["acceptance"]["verdict"] == "INCOMPLETE"
    measured = [t for t in doc["tests"] if MEASURE_FIRST.split("::")[1] in t["nodeid"]]
    assert measured[0]["outcome"] == "passed", out[-3000:]
    assert {m["metric"] for m in measured[0]["measurements"]} == {"sharedfs.capacity", "sharedfs.free"}
    long = [t for t in doc["tests"] if "test_long_job_on_every_node" in t["nodeid"]]
    assert long and long[0]["outcome"] in ("interrupted", "failed"), long
    assert html.exists() and html.stat().st_size > 0

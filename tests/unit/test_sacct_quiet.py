"""submitit's "Bypassing sacct error" warning, which it logs at every failed state query, is dropped
where the profile has no accounting (the launcher follows jobs through the queue) and kept where it
has: the real watcher's query, with sacct missing from PATH as on a login node without accounting."""

from __future__ import annotations

import logging

import pytest
import submitit

from pytest_gpucluster.launch.watcher import SlurmWatcher, sacct_bypass_quiet


def _query_state(tmp_path, accounting: bool) -> str:
    watcher = SlurmWatcher(accounting=accounting)
    return watcher.job_state(submitit.SlurmJob(folder=tmp_path, job_id="4711"), force=True)


@pytest.fixture
def no_slurm_tools(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))  # no sacct, no squeue here


def _bypassed(caplog) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "submitit" and "Bypassing sacct error" in r.getMessage()]


def test_without_accounting_the_sacct_warnings_are_dropped(tmp_path, no_slurm_tools, caplog):
    caplog.set_level(logging.INFO, logger="submitit")
    for _ in range(3):
        assert _query_state(tmp_path, accounting=False) == "UNKNOWN"
    assert _bypassed(caplog) == []
    # Only the launcher's own queries are quiet: the filter is gone once the query returns.
    logging.getLogger("submitit").warning("Call #9 - Bypassing sacct error elsewhere, status may be inaccurate.")
    assert len(_bypassed(caplog)) == 1
    assert not logging.getLogger("submitit").filters


def test_with_accounting_a_failing_sacct_is_still_said(tmp_path, no_slurm_tools, caplog):
    caplog.set_level(logging.INFO, logger="submitit")
    _query_state(tmp_path, accounting=True)
    (record,) = _bypassed(caplog)
    assert record.levelno == logging.WARNING and "status may be inaccurate" in record.getMessage()


def test_other_submitit_records_pass_the_filter(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="submitit")
    with sacct_bypass_quiet():
        logging.getLogger("submitit").warning("Bypassing state error:\nsomething else")
    assert [r.getMessage() for r in caplog.records] == ["Bypassing state error:\nsomething else"]

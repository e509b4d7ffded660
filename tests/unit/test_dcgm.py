"""DCGM diagnostic parsing on representative ``dcgmi diag -j`` documents (tests/data/dcgm_*): the
3.x shape as DCGM's JsonOutput writes it (pass; GPU 5 failing memory, GPU 2 warning on PCIe) and
the 4.x shape (GPU 3 failing)."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_gpucluster.checks import dcgm as dcgm_checks
from pytest_gpucluster.workloads import dcgm

DATA = Path(__file__).parent.parent / "data"


def _run(name: str, **kw) -> dcgm.DiagRun:
    return dcgm.DiagRun(
        node="worker3",
        found=True,
        level=2,
        returncode=kw.pop("returncode", 0),
        stdout=(DATA / name).read_text() if name else "",
        **kw,
    )


def _texts(run: dcgm.DiagRun) -> list[str]:
    return [f.text for f in dcgm_checks.diag_findings(run)]


def test_passing_run_has_no_problem():
    results, facts = dcgm_checks.parse_diag((DATA / "dcgm_diag_r2_pass.json").read_text())
    assert facts == {"version": "3.3.7", "driver": "560.35.03"}
    assert {r.status for r in results} == {"pass", "skip"}
    assert len([r for r in results if r.test == "GPU Memory"]) == 8
    software = [r for r in results if r.test == "Denylist"]
    assert [(r.gpu, r.category) for r in software] == [("all", "Deployment")]
    assert dcgm_checks.diag_findings(_run("dcgm_diag_r2_pass.json")) == []


def test_failing_gpu_is_named_with_dcgms_words():
    found = dcgm_checks.diag_findings(_run("dcgm_diag_r2_gpu5_fail.json", returncode=226))
    assert [(f.scope, f.gpu, f.culprits, f.severity) for f in found] == [
        ("gpu", 2, ("worker3",), "fail"),  # a DCGM Warn fails the GPU too
        ("gpu", 5, ("worker3",), "fail"),
    ]
    assert [f.text for f in found] == [
        "worker3:gpu2: DCGM Integration test 'PCIe' WARN: GPU 2 PCIe link width is x8, expected x16 "
        "(DCGM_FR_PCI_LINK_WIDTH) (DCGM error 61)",
        "worker3:gpu5: DCGM Hardware test 'GPU Memory' FAIL: GPU 5 Memory test failed: 2 DBE errors detected on "
        "GPU 5. Drain the GPU and reset it or reboot the node. (DCGM error 95); GPU 5 Allocated 81920507904 bytes "
        "(98.2%)",
    ]


def test_dcgm4_document():
    results, facts = dcgm_checks.parse_diag((DATA / "dcgm_diag_4x_gpu3_fail.json").read_text())
    assert facts == {"version": "4.2.3", "driver": "570.124.06"}
    assert [(r.test, r.gpu, r.status) for r in results if r.status != "pass"] == [("memory", "3", "fail")]
    assert _texts(_run("dcgm_diag_4x_gpu3_fail.json")) == [
        "worker3:gpu3: DCGM Hardware test 'memory' FAIL: Error using CUDA API cudaMalloc (DCGM_FR_CUDA_API) "
        "(DCGM error 24)"
    ]


def test_unreadable_output_and_timeout_are_problems():
    refused = "Error: unable to establish a connection to the specified host: localhost"
    broken = dcgm.DiagRun("worker3", True, 1, returncode=255, stdout="", stderr=refused)
    assert _texts(broken) == [
        "worker3: dcgmi diag -r 1 exited 255 without a readable result (no JSON object in dcgmi's output): "
        "Error: unable to establish a connection to the specified host: localhost"
    ]
    hung = dcgm.DiagRun("worker3", True, 3, stdout="", seconds=3600.2, timed_out=True)
    assert _texts(hung) == [
        "worker3: dcgmi diag -r 3 did not finish within its time limit (3600 s); the GPUs may be hung"
    ]
    assert {(f.scope, f.culprits) for f in dcgm_checks.diag_findings(broken) + dcgm_checks.diag_findings(hung)} == {
        ("node", ("worker3",))
    }
    with pytest.raises(ValueError, match="no 'DCGM GPU Diagnostic'"):
        dcgm_checks.parse_diag('{"something": "else"}')


def test_missing_dcgmi_is_reported_not_run():
    from pytest_gpucluster.workloads.context import local_context

    run = dcgm.run_diag(local_context(), level=1)
    assert run is not None
    assert run.found is False  # this machine has no DCGM: the acceptance test skips with that reason


def test_job_time_limits_cover_each_level():
    assert [dcgm_checks.job_minutes(level) for level in (1, 2, 3, 4)] == [10, 20, 65, 185]

"""nvbandwidth: parsing its text and JSON outputs (tests/data/nvbandwidth_*, see tests/data/README.md),
per-GPU judging against the shipped h100 lines, and the workload's answers when the binary is absent
or does not finish."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from pytest_gpucluster.checks import nvbandwidth as judging
from pytest_gpucluster.config.load import load
from pytest_gpucluster.verdict import judge
from pytest_gpucluster.workloads import nvbandwidth
from pytest_gpucluster.workloads.context import local_context

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "tests" / "data"
HEALTHY = "nvbandwidth_8xH100_representative_sample"
FAILING = "nvbandwidth_8xH100_gpu5_x8_gpu2_gpu6_slow_representative_sample.txt"


def _run(name: str, **kw) -> nvbandwidth.NvbandwidthRun:
    text = (DATA / name).read_text()
    return nvbandwidth.NvbandwidthRun(
        node="gpu-01", found=True, json_output=name.endswith(".json"), returncode=0, stdout=text, **kw
    )


@pytest.fixture(scope="module")
def h100():
    config = load(REPO / "thresholds.toml")
    return config.thresholds_for(config.profile("nebius"))


def test_text_output_gives_every_gpu_both_directions_and_its_worst_pair():
    read = judging.node_copies(_run(f"{HEALTHY}.txt"))
    assert read.problems == ()
    assert read.gpus == 8
    assert read.facts == {"version": "v0.8", "driver": "570.124.06"}
    assert read.host_to_device[0] == 55.51 and read.device_to_host[6] == 55.21
    assert sorted(read.host_to_device) == sorted(read.device_to_device) == list(range(8))
    value, pair = read.device_to_device[3]
    assert 388 < value < 391 and "gpu3" in pair and " <- " in pair


def test_json_output_reads_the_same_as_the_text():
    text = judging.node_copies(_run(f"{HEALTHY}.txt"))
    doc = judging.node_copies(_run(f"{HEALTHY}.json"))
    assert doc.problems == ()
    assert (doc.host_to_device, doc.device_to_host, doc.device_to_device) == (
        text.host_to_device,
        text.device_to_host,
        text.device_to_device,
    )


def test_healthy_node_is_within_the_h100_lines(h100):
    read = judging.node_copies(_run(f"{HEALTHY}.txt"))
    measured = judging.host_device_measurements(read) + judging.device_to_device_measurements(read)
    assert len(measured) == 24
    assert {judge(m, h100[m.metric]).status for m in measured} == {"pass"}


def test_failing_gpu_and_pair_are_named_with_testcase_value_and_line(h100):
    read = judging.node_copies(_run(FAILING))
    verdicts = [
        v
        for m in judging.host_device_measurements(read) + judging.device_to_device_measurements(read)
        if (v := judge(m, h100[m.metric])).status == "fail"
    ]
    failed = [v.sentence for v in verdicts]
    found = verdicts[0].finding()
    assert found is not None and (found.scope, found.nodes, found.gpu) == ("gpu", ("gpu-01",), 5)
    assert failed[0].startswith(
        "gpu-01:gpu5: nvbandwidth.host_to_device (host_to_device_memcpy_ce) = 27.23 GB/s is below the fail line 48 GB/s"
    )
    assert failed[1].startswith(
        "gpu-01:gpu5: nvbandwidth.device_to_host (device_to_host_memcpy_ce) = 27.14 GB/s is below the fail line 48 GB/s"
    )
    # The slow pair fails both of its GPUs, each naming both.
    assert [s.split(" = ")[0] for s in failed[2:]] == [
        "gpu-01:gpu2: nvbandwidth.device_to_device (device_to_device_memcpy_read_ce, worst pair gpu6 <- gpu2)",
        "gpu-01:gpu6: nvbandwidth.device_to_device (device_to_device_memcpy_read_ce, worst pair gpu6 <- gpu2)",
    ]
    assert "118.9 GB/s is below the fail line 335 GB/s" in failed[2]


def test_a_node_of_one_gpu_has_its_device_to_device_testcase_waived():
    doc = (
        '{"nvbandwidth": {"testcases": ['
        '{"name": "host_to_device_memcpy_ce", "status": "Passed", "bandwidth_matrix": [["55.1"]]},'
        '{"name": "device_to_host_memcpy_ce", "status": "Passed", "bandwidth_matrix": [["54.9"]]},'
        '{"name": "device_to_device_memcpy_read_ce", "status": "Waived"}]}}'
    )
    read = judging.node_copies(nvbandwidth.NvbandwidthRun("gpu-01", True, json_output=True, stdout=doc))
    assert read.problems == () and read.gpus == 1 and read.device_to_device == {}
    assert read.host_to_device == {0: 55.1}


def test_a_run_past_its_timeout_is_a_problem_naming_the_node():
    run = nvbandwidth.NvbandwidthRun(
        "gpu-01", True, argv=("/opt/nvbandwidth", "-t", "host_to_device_memcpy_ce"), timed_out=True, timeout_s=600
    )
    read = judging.node_copies(run)
    (problem,) = read.problems
    assert problem.finding.text.startswith(
        "gpu-01: nvbandwidth did not finish within its timeout of 600 s (/opt/nvbandwidth -t "
    )
    assert (problem.testcase, problem.finding.scope, problem.finding.culprits) == (None, "node", ("gpu-01",))
    assert read.unread(judging.D2D) == read.unread(judging.H2D) == [problem.finding]  # the whole run


def test_an_exit_without_output_names_the_node_and_the_tail():
    run = nvbandwidth.NvbandwidthRun("gpu-01", True, returncode=1, stderr="cuInit failed: CUDA_ERROR_NO_DEVICE\n")
    read = judging.node_copies(run)
    assert len(read.problems) == 3
    assert read.problems[0].finding.text == (
        "gpu-01: nvbandwidth gave no result for host_to_device_memcpy_ce (exit 1: cuInit failed: CUDA_ERROR_NO_DEVICE)"
    )
    assert [u.testcase for u in read.problems] == list(nvbandwidth.TESTCASES)
    assert [f.text.split(" for ")[1].split(" ")[0] for f in read.unread(judging.D2D)] == [judging.D2D]


def test_absent_binary_is_an_answer_not_an_error(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    run = nvbandwidth.run_nvbandwidth(local_context())
    assert run is not None and not run.found and run.absent == "not on PATH"
    named = nvbandwidth.run_nvbandwidth(local_context(), path=str(tmp_path / "nvbandwidth"))
    assert named is not None and not named.found
    assert named.absent == f"no executable at {tmp_path / 'nvbandwidth'} (profile key nvbandwidth_path)"


def _stand_in(tmp_path: Path, body: str) -> str:
    """An executable standing in for the tool: answers --help, else runs ``body``."""
    path = tmp_path / "nvbandwidth"
    path.write_text(f'#!/bin/sh\nif [ "$1" = "--help" ]; then echo "  -j [ --json ]"; exit 0; fi\n{body}\n')
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def test_the_workload_kills_a_run_past_its_timeout(tmp_path):
    run = nvbandwidth.run_nvbandwidth(local_context(), path=_stand_in(tmp_path, "exec sleep 30"), timeout_s=0.5)
    assert run is not None and run.found and run.timed_out and run.json_output
    assert run.argv[1:] == ("-t", *nvbandwidth.TESTCASES, "-j")
    assert "did not finish within its timeout of 0.5 s" in judging.node_copies(run).problems[0].finding.text


def test_the_workload_brings_back_what_the_tool_printed(tmp_path):
    sample = DATA / f"{HEALTHY}.json"
    run = nvbandwidth.run_nvbandwidth(local_context(), path=_stand_in(tmp_path, f"cat {sample}"))
    assert run is not None and run.returncode == 0
    assert judging.node_copies(run).host_to_device[0] == 55.51
    assert os.path.basename(run.argv[0]) == "nvbandwidth"

"""The plugin as pytest sees it: options, markers, skips with reasons, usage errors, xdist."""

from __future__ import annotations

import json
import os

import pytest

PLACEMENT = """
import pytest
from pytest_gpucluster.checks.placement import placement_findings
from pytest_gpucluster.workloads.placement import report_placement

@pytest.mark.parametrize("tasks", [1, 2])
def test_placement(gpucluster, judge, tasks):
    results = gpucluster.run(report_placement, gpucluster.spec("p", tasks_per_node=tasks, gpus_per_node=0))
    found = placement_findings([r.value for r in results], 1, tasks, on=[r.node for r in results])
    judge.findings(found, "bad placement")
    assert {r.rank for r in results} == set(range(tasks))

@pytest.mark.across_nodes
def test_two_nodes():
    pass

@pytest.mark.gpu(2)
def test_two_gpus():
    pass
"""


def test_help_shows_the_option_group(gpc):
    result = gpc.runpytest("--help")
    result.stdout.fnmatch_lines(
        [
            "*GPU cluster acceptance*",
            "*--cluster=NAME*",
            "*--gpucluster-thresholds=PATH*",
            "*--gpucluster-results=PATH*",
        ]
    )


def test_markers_are_registered(gpc):
    result = gpc.runpytest("--markers")
    assert "@pytest.mark.multinode: the acceptance of a multi-node cluster" in result.stdout.str()
    assert "@pytest.mark.across_nodes: needs at least 2 nodes" in result.stdout.str()
    assert "@pytest.mark.gpu(count=1, gres_only=False): needs `count` GPUs per node" in result.stdout.str()
    gpc.makepyfile("import pytest\n@pytest.mark.across_nodes\n@pytest.mark.gpu\ndef test_x():\n    pass\n")
    assert gpc.runpytest("--strict-markers", "--collect-only").ret == 0


def test_unmet_needs_are_not_applicable_with_the_reason(gpc):
    gpc.makepyfile(PLACEMENT)
    result = gpc.runpytest("--cluster=local")
    assert result.ret == 0
    result.stdout.fnmatch_lines(
        [
            "*gpucluster: ACCEPTED (2 pass, 2 n/a)*",
            "*1 × profile 'local' has 1 node; this check needs 2*",
            "*1 × profile 'local' has 0 GPU(s) per node (NVML found that many on this machine); this check needs 2*",
            "*2 passed, 2 n/a in *",
        ]
    )


def test_unknown_cluster_is_a_usage_error_listing_profiles(gpc):
    gpc.makepyfile("def test_x():\n    pass\n")
    result = gpc.runpytest("--cluster=nebuis")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert (
        f"ERROR: --cluster=nebuis: no profile [profiles.nebuis] in {gpc.path / 'thresholds.toml'}; profiles are: "
        "ci, local, nebius, nebius-h200, testbox, testbox-1gpu, testbox-2gpu, testbox-2node, testbox-2x1, testbox-2x2, "
        "testbox-4x1. "
        "Perhaps you meant 'nebius'?"
    ) in result.stderr.str()
    assert "Traceback" not in result.stderr.str()


def test_bad_thresholds_key_is_a_usage_error_naming_file_and_key(gpc):
    text = (gpc.path / "thresholds.toml").read_text().replace("job_timeout_min = 15", "job_timout_min = 15", 1)
    (gpc.path / "bad.toml").write_text(text)
    gpc.makepyfile("def test_x():\n    pass\n")
    result = gpc.runpytest("--gpucluster-thresholds=bad.toml")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*bad.toml: profiles.local.job_timout_min: unknown key. Perhaps you meant 'job_timeout_min'?"]
    )


def test_missing_thresholds_file_names_the_path_tried(gpc):
    gpc.makepyfile("def test_x():\n    pass\n")
    result = gpc.runpytest("--gpucluster-thresholds=nowhere.toml")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*nowhere.toml: no such file (from --gpucluster-thresholds).*"])


def test_results_json_under_xdist_is_written_by_the_controller(gpc):
    gpc.makepyfile(PLACEMENT)
    result = gpc.runpytest_subprocess("-n", "2", "--gpucluster-results=out.json")
    result.stdout.fnmatch_lines(["*2 passed, 2 n/a in *"])
    doc = json.loads((gpc.path / "out.json").read_text())
    assert doc["acceptance"]["verdict"] == "ACCEPTED"  # the workers' view of the required set reached it
    assert len(doc["selection"]["required"]) == 2 and len(doc["selection"]["not_applicable"]) == 2
    assert doc["schema_version"] == 2 and doc["status"] == "complete" and doc["profile"] == "local"
    outcomes = {t["nodeid"].split("::")[1]: t["outcome"] for t in doc["tests"]}
    assert outcomes == {
        "test_placement[1]": "passed",
        "test_placement[2]": "passed",
        "test_two_nodes": "skipped",
        "test_two_gpus": "skipped",
    }
    placed = next(t for t in doc["tests"] if t["nodeid"].endswith("test_placement[2]"))
    assert len(placed["job_ids"]) == 1 and placed["duration_s"] > 0


def test_interrupted_run_keeps_what_was_measured(gpc):
    gpc.makepyfile(
        """
        from pytest_gpucluster.verdict import Measurement

        def test_first(judge):
            judge(Measurement("gpu.temperature", 40.0, "C", where="n1:gpu0"))

        def test_second():
            raise KeyboardInterrupt
        """
    )
    result = gpc.runpytest_subprocess("--gpucluster-results=out.json")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    doc = json.loads((gpc.path / "out.json").read_text())
    assert doc["status"] == "interrupted"
    first = doc["tests"][0]
    assert first["outcome"] == "passed"
    assert first["measurements"][0]["value"] == 40.0 and first["measurements"][0]["status"] == "pass"


def test_failed_judgement_names_value_bound_and_place(gpc):
    gpc.makepyfile(
        """
        from pytest_gpucluster.verdict import Measurement

        def test_hot(judge):
            judge.all([Measurement("gpu.temperature", t, "C", where=f"n1:gpu{i}") for i, t in enumerate([40, 91, 95])])
        """
    )
    result = gpc.runpytest()
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*n1:gpu1: gpu.temperature = 91 C is above the fail line 85 C*",
            "*n1:gpu2: gpu.temperature = 95 C is above the fail line 85 C*",
        ]
    )


BACKEND = """
import os
from pytest_gpucluster.workloads.distributed import BACKEND_ENV, pick_backend

def _backend(ctx):
    return os.environ.get(BACKEND_ENV), pick_backend()

def test_backend(gpucluster):
    got = [r.value for r in gpucluster.run(_backend, gpucluster.spec("backend", gpus_per_node=0))]
    print("BACKEND", got)
"""


def test_a_profile_without_real_gpus_runs_its_workloads_on_the_cpu_path(gpc):
    # On a host with GPUs, a profile that says its GPUs are GRES only must not take the CUDA path:
    # its jobs are told to use gloo, and every workload's backend choice follows that.
    (gpc.path / "fake.toml").write_text(
        (gpc.path / "thresholds.toml").read_text()
        + '\n[profiles.cpuonly]\nextends = "local"\ngpus_are_real = false\n'
        + "gpus_per_node = 2\n"
    )
    gpc.makepyfile(BACKEND)
    result = gpc.runpytest("--cluster=cpuonly", "--gpucluster-thresholds=fake.toml", "-s")
    result.stdout.fnmatch_lines(["*BACKEND [[]('gloo', 'gloo')[]]"])
    assert result.ret == 0


RIDES = """
import os
import pytest
from pytest_gpucluster.plan.jobs import JobRequest

HOST = JobRequest("host", "a measuring job")
RIDER = JobRequest("rider", "a reading that may ride in the host", rides_in="host")

@pytest.mark.uses(RIDER)
def test_reader(gpucluster):
    assert (gpucluster.plan.rides_in("rider") == "host") is (os.environ["EXPECT_RIDE"] == "1")

@pytest.mark.uses(HOST)
def test_host():
    pass

@pytest.mark.uses(HOST)
@pytest.mark.skip(reason="off")
def test_off():
    pass
"""


def test_a_reading_rides_only_in_a_job_the_selection_runs_and_never_on_an_xdist_worker(gpc, monkeypatch):
    # A measurement rides in another test's job only where that test surely runs in this process.
    gpc.makepyfile(RIDES)
    monkeypatch.setenv("EXPECT_RIDE", "1")
    gpc.runpytest_subprocess().assert_outcomes(passed=2, skipped=1)
    monkeypatch.setenv("EXPECT_RIDE", "0")
    gpc.runpytest_subprocess("-k", "reader or off").assert_outcomes(passed=1, skipped=1)
    gpc.runpytest_subprocess("-n", "2").assert_outcomes(passed=2, skipped=1)  # a worker cannot tell


def test_uses_takes_job_requests_only(gpc):
    gpc.makepyfile("import pytest\n\n@pytest.mark.uses('node-probe')\ndef test_x(gpucluster):\n    pass\n")
    result = gpc.runpytest_subprocess()
    result.stdout.fnmatch_lines(["*test_x: @pytest.mark.uses takes JobRequest objects*not 'node-probe'*"])
    assert result.ret != 0


JOB = """
def _hello(ctx):
    return ctx.hostname

def test_job(gpucluster):
    assert gpucluster.run(_hello, gpucluster.spec("hello", gpus_per_node=0))[0].value
"""


def test_a_local_run_leaves_no_job_folder_and_removes_those_of_killed_runs(gpc, monkeypatch, tmp_path):
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    orphan = tmp_path / "pytest-gpucluster-jobs-999999999-abcd1234"  # no such process
    live = tmp_path / f"pytest-gpucluster-jobs-{os.getpid()}-abcd1234"  # this process: still running
    for folder in (orphan, live):
        (folder / "job").mkdir(parents=True)
    gpc.makepyfile(JOB)
    gpc.runpytest_subprocess().assert_outcomes(passed=1)
    assert sorted(p.name for p in tmp_path.glob("pytest-gpucluster-jobs-*")) == [live.name]


SHARED_FAILURE = """
import pytest
from pytest_gpucluster.errors import LaunchError

def _job(gpucluster):
    def produce():
        raise LaunchError("job 7 (x-probe): submission refused: node2 offers 4 GPU(s)")
    return gpucluster.once("probe", produce)

@pytest.mark.parametrize("part", ["a", "b", "c"])
def test_reads(gpucluster, part):
    _job(gpucluster)
"""


def test_a_failure_shared_by_several_tests_is_shown_once_as_its_message(gpc):
    gpc.makepyfile(SHARED_FAILURE)
    result = gpc.runpytest_subprocess()
    result.assert_outcomes(failed=3)
    out = result.stdout.str()
    # The suite's own error is its message, naming job and node; no harness traceback.
    assert out.count("raise LaunchError") == 0, out
    full = "pytest_gpucluster.errors.LaunchError: job 7 (x-probe): submission refused: node2 offers 4 GPU(s)"
    assert [line for line in out.splitlines() if line == full] == [full], out
    result.stdout.fnmatch_lines(
        [
            "job 7 (x-probe): submission refused: node2 offers 4 GPU(s) (the same failure as in "
            "test_a_failure_shared_by_several_tests_is_shown_once_as_its_message.py::test_reads"
            "[[]a[]], which shows it in full)"
        ]
    )
    # --tb=long shows the traceback, once.
    long = gpc.runpytest_subprocess("--tb=long").stdout.str()
    assert long.count(">       raise LaunchError") == 1, long


PROGRESS = """
from pytest_gpucluster.plugin import SESSION_KEY

def test_waits(pytestconfig, gpucluster):
    pytestconfig.stash[SESSION_KEY].progress.job_status("4711", "PENDING", "Resources")
"""


def test_live_progress_reaches_output_that_is_not_a_terminal(gpc):
    # pytester's subprocess writes to a pipe, as a CI runner's log does.
    gpc.makepyfile(PROGRESS)
    result = gpc.runpytest_subprocess()
    result.stdout.fnmatch_lines(["*[[]gpucluster[]] job 4711 PENDING (Resources) for test_waits*"])


UNDECLARED = """
def test_reads_nothing_declared(measured):
    measured()
"""


def test_a_check_reading_no_declared_job_is_not_judged_and_rejects_no_node(gpc):
    # The check's own declaration is wrong, not any node: the run is INCOMPLETE (exit 1, a harness
    # error), and the first line names the test and what to write.
    gpc.makepyfile(test_undeclared=UNDECLARED)
    result = gpc.runpytest_subprocess("--gpucluster-results=r.json")
    result.stdout.fnmatch_lines(
        ["*INCOMPLETE*", "*test_reads_nothing_declared: measured() without a request needs exactly one declared job*"]
    )
    assert "REJECTED" not in result.stdout.str()
    (test,) = json.loads((gpc.path / "r.json").read_text())["tests"]
    assert test["unjudged"] == "DeclarationError", test
    assert result.ret == 1


FINDINGS = """
from pytest_gpucluster.verdict import Finding

def test_gpu_fault(judge):
    judge.findings([Finding.on_node("n1", "n1:gpu3: 2 row remaps pending", gpu=3),
                    Finding.on_node("n1", "n1:gpu1: warm", gpu=1, severity="warn")], "row remaps")

def test_warm_only(judge):
    judge.findings([Finding.on_node("n1", "n1:gpu1: warm", gpu=1, severity="warn")], "heat")

def test_config(judge):
    judge.findings([Finding.outside("config", "NCCL_SOCKET_IFNAME=ib9 matches no interface of n1",
                                    nodes=["n1"], setting="env.NCCL_SOCKET_IFNAME", severity="not_judged")], "config")
"""


def test_findings_are_recorded_as_data_and_end_the_check_by_the_worst(gpc):
    gpc.makepyfile(FINDINGS)
    result = gpc.runpytest_subprocess("--gpucluster-results=r.json")
    tests = {t["name"]: t for t in json.loads((gpc.path / "r.json").read_text())["tests"]}
    fault = tests["test_gpu_fault"]
    assert fault["verdict"] == "fail" and fault["message"] == "Failed: n1:gpu3: 2 row remaps pending (row remaps)"
    assert [(f["scope"], f["gpu"], f["culprits"], f["severity"]) for f in fault["findings"]] == [
        ("gpu", 3, ["n1"], "fail"),
        ("gpu", 1, ["n1"], "warn"),
    ]
    assert fault["warnings"] == ["n1:gpu1: warm"]  # said beside the failure too
    assert tests["test_warm_only"]["verdict"] == "warn" and tests["test_warm_only"]["warnings"] == ["n1:gpu1: warm"]
    config = tests["test_config"]
    assert config["verdict"] == "not_judged" and config["findings"][0]["setting"] == "env.NCCL_SOCKET_IFNAME"
    assert config["message"].endswith("could not judge: NCCL_SOCKET_IFNAME=ib9 matches no interface of n1")
    result.stdout.fnmatch_lines(["*= 1 failed, 1 passed, 2 warnings, 1 not judged in *"])

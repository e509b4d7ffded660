"""The run's acceptance verdict (``verdict.run``): REJECTED, INCOMPLETE, PARTIAL or ACCEPTED with its
reasons, counts and warnings; and the exit status each verdict gives (``verdict.exit``)."""

from __future__ import annotations

import pytest
from result_docs import document as _doc
from result_docs import finding as _f
from result_docs import record_of_test as _t

from pytest_gpucluster import verdict
from pytest_gpucluster.results import codec
from pytest_gpucluster.verdict import EXIT_INCOMPLETE, exit_status


def _sel(required, not_selected=(), not_applicable=None, named=()):
    return {
        "required": list(required),
        "not_selected": list(not_selected),
        "named": list(named),
        "not_applicable": dict(not_applicable or {}),
        "optional": [],
    }


def test_any_failure_rejects_even_an_interrupted_run_and_names_the_culprit():
    tests = [_t("a::t1", "pass"), _t("a::t2", "fail", message="Failed: node2 slow")]
    acc = verdict.acceptance(codec.decode_run(_doc(tests, "interrupted")))
    assert acc.verdict == "REJECTED" and acc.reasons == ("node2 slow (a::t2)",)
    assert acc.headline == "REJECTED: 1 check failed"


def test_a_cluster_error_reads_as_its_sentence_without_the_exception_path():
    lost = _t(
        "a::t2",
        "fail",
        message="pytest_gpucluster.errors.NodeLostError: job 1 (x-nccl-inter) on node1, "
        "node2: lost its node(s) while RUNNING: node2 is DOWN\nlogs: ...",
    )
    acc = verdict.acceptance(codec.decode_run(_doc([lost])))
    expected = "job 1 (x-nccl-inter) on node1, node2: lost its node(s) while RUNNING: node2 is DOWN (a::t2)"
    assert acc.reasons == (expected,)


def test_every_problem_of_a_failure_is_a_reason_not_only_the_first_line():
    failed = _t(
        "x/test_slurm_health.py::test_nodes_are_usable",
        "fail",
        message="Failed: nodes of partition 'debug' are not usable:\n- node2: DRAIN (bad DIMM)",
        findings=[_f("node2: DRAIN (bad DIMM)", node="node2"), _f("node3: DOWN (not responding)", node="node3")],
    )
    acc = verdict.acceptance(codec.decode_run(_doc([failed])))
    assert acc.reasons == (
        "node2: DRAIN (bad DIMM) (test_slurm_health.py::test_nodes_are_usable)",
        "node3: DOWN (not responding) (test_slurm_health.py::test_nodes_are_usable)",
    )


def test_a_required_check_skipped_or_not_reached_is_incomplete():
    assert verdict.acceptance(codec.decode_run(_doc([_t("a::t1", "pass")], "interrupted"))).verdict == "INCOMPLETE"
    tests = [_t("a::t1", "pass"), _t("b::t2", "not_judged", message="Skipped: node2 is excluded: DRAIN")]
    acc = verdict.acceptance(codec.decode_run({**_doc(tests), "selection": _sel(["a::t1", "b::t2", "c::t3"])}))
    assert acc.verdict == "INCOMPLETE"
    assert acc.reasons == (
        "b::t2: not judged: node2 is excluded: DRAIN",
        "c::t3: not reached (the run ended before it)",
    )
    assert verdict.acceptance(codec.decode_run(_doc([]))).verdict == "INCOMPLETE"


def test_an_error_of_the_harness_is_incomplete_an_error_of_the_cluster_rejects():
    harness = _t("a::t2", "not_judged", message="AttributeError: 'NoneType' object has no attribute 'x'")
    acc = verdict.acceptance(
        codec.decode_run(
            {
                **_doc([_t("a::t1", "pass"), {**harness, "unjudged": "AttributeError"}]),
                "selection": _sel(["a::t1", "a::t2"]),
            }
        )
    )
    assert acc.verdict == "INCOMPLETE" and acc.reasons[0].startswith("a::t2: could not be judged (AttributeError)")
    cluster = _t("a::t2", "fail", message="LaunchError: job 7 on node2: submission refused")
    assert verdict.acceptance(codec.decode_run(_doc([_t("a::t1", "pass"), cluster]))).verdict == "REJECTED"


def test_not_applicable_is_neither_a_pass_nor_missing():
    tests = [_t("a::t1", "pass"), _t("b::t2", "n/a", message="Skipped: not applicable: profile has 1 node")]
    acc = verdict.acceptance(
        codec.decode_run({**_doc(tests), "selection": _sel(["a::t1"], not_applicable={"b::t2": "1 node"})})
    )
    assert acc.verdict == "ACCEPTED" and acc.counts["n/a"] == 1 and acc.not_applicable == ("b::t2: 1 node",)
    only_na = verdict.acceptance(
        codec.decode_run({**_doc([tests[1]]), "selection": _sel([], not_applicable={"b::t2": "1 node"})})
    )
    assert only_na.verdict == "INCOMPLETE" and only_na.reasons == ("no acceptance check passed",)


def test_a_narrower_selection_is_partial_never_accepted():
    tests = [_t("a::t1", "pass")]
    acc = verdict.acceptance(
        codec.decode_run({**_doc(tests), "selection": _sel(["a::t1", "b::t2", "b::t3"], ["b::t2", "b::t3"])})
    )
    assert acc.verdict == "PARTIAL"
    assert acc.headline == "PARTIAL: 1 selected check passed; 2 required checks not selected"
    named = verdict.acceptance(
        codec.decode_run({**_doc(tests), "selection": _sel(["a::t1"], named=["tests/acceptance/test_a.py"])})
    )
    assert named.verdict == "PARTIAL" and "the command line names tests/acceptance/test_a.py" in named.reasons[0]
    failed = verdict.acceptance(
        codec.decode_run({**_doc([_t("a::t1", "fail", message="x")]), "selection": _sel(["a::t1", "b"], ["b"])})
    )
    assert failed.verdict == "REJECTED"


def test_warnings_accept_and_are_counted_in_the_headline():
    warned = {**_t("a::t1", "warn"), "warnings": ["node1: device cgroups are off"]}
    acc = verdict.acceptance(codec.decode_run(_doc([warned, _t("a::t2", "pass")])))
    assert acc.verdict == "ACCEPTED" and acc.counts["warn"] == 1 and acc.counts["pass"] == 1
    assert acc.headline == "ACCEPTED, 1 warning" and acc.warnings == ("node1: device cgroups are off (a::t1)",)


def test_the_not_applicable_list_and_count_are_the_same_checks():
    # Known at collection and run (n/a), found when it ran (n/a, not in the selection), known at
    # collection but deselected (no record): the run's n/a are the first two, counted and listed.
    tests = [
        _t("a::t1", "pass"),
        _t("a::t2[node2]", "n/a", node="node2", message="Skipped: not applicable: profile 'ci' has GRES-only GPUs"),
        _t("b::t3", "n/a", message="Skipped: not applicable: nvbandwidth is not installed on node1"),
    ]
    sel = _sel(["a::t1"], not_applicable={"a::t2[node2]": "GRES-only GPUs", "c::t4": "1 node"})
    acc = verdict.acceptance(codec.decode_run({**_doc(tests), "selection": sel}))
    assert acc.counts["n/a"] == len(acc.not_applicable) == 2
    assert acc.not_applicable == ("a::t2[node2]: GRES-only GPUs", "b::t3: nvbandwidth is not installed on node1")


@pytest.mark.parametrize(
    ("run", "pytest_status", "faults_only", "expected"),
    [
        ("ACCEPTED", 0, False, 0),
        ("PARTIAL", 0, False, 0),
        ("REJECTED", 1, False, 1),
        ("INCOMPLETE", 0, False, EXIT_INCOMPLETE),  # a check skipped or not reached
        ("INCOMPLETE", 1, True, EXIT_INCOMPLETE),  # checks stopped by a fault outside the nodes
        ("INCOMPLETE", 1, False, 1),  # a harness error keeps pytest's own status
        ("INCOMPLETE", 2, False, 2),  # interrupted
        ("INCOMPLETE", 5, False, 5),  # nothing collected
    ],
)
def test_each_verdict_exits_with_its_code(run, pytest_status, faults_only, expected):
    assert exit_status(run, pytest_status, faults_only=faults_only) == expected


def test_the_handover_verdict_decides_the_exit_status_of_a_merge():
    assert exit_status("REJECTED", 1, handover="ACCEPTED") == 0
    assert exit_status("ACCEPTED", 0, handover="REJECTED") == 1
    assert exit_status("ACCEPTED", 0, handover="INCOMPLETE") == EXIT_INCOMPLETE
    assert exit_status("INCOMPLETE", 0, handover="ACCEPTED") == 0
    assert exit_status("ACCEPTED", 2, handover="ACCEPTED") == 2  # an interrupted run stays interrupted


def test_a_results_file_alone_exits_by_its_verdict():
    assert [exit_status(v) for v in ("ACCEPTED", "PARTIAL", "REJECTED", "INCOMPLETE")] == [0, 0, 1, EXIT_INCOMPLETE]


def test_only_checks_stopped_by_a_fault_outside_the_nodes_make_a_fault_exit():
    fault = {"what": "slurmctld", "sentence": "the Slurm controller did not answer"}
    stopped = {"nodeid": "a::t1", "outcome": "error", "verdict": "fault", "cluster_fault": fault}
    harness = {"nodeid": "a::t2", "outcome": "failed", "verdict": "not_judged", "cluster_fault": None}
    assert verdict.stopped_by_faults_only(
        codec.decode_run({"tests": [stopped, {"nodeid": "a::t3", "outcome": "passed"}]})
    )
    assert not verdict.stopped_by_faults_only(codec.decode_run({"tests": [stopped, harness]}))

"""The run's end (``finish.py``): the results' status and end time, the verdicts recorded, the
rejected nodes drained once after the verdict (``drain.py``), the handover merged and the exit
status given."""

from __future__ import annotations

from types import SimpleNamespace

from pytest_gpucluster.config.options import Outputs
from pytest_gpucluster.errors import SlurmQueryError
from pytest_gpucluster.results import codec
from pytest_gpucluster.results.document import ResultsDocument
from pytest_gpucluster.results.drain import drain_rejected
from pytest_gpucluster.results.finish import finish
from pytest_gpucluster.slurm.rights import right_needed
from pytest_gpucluster.verdict import EXIT_INCOMPLETE, Finding

NODES = {
    "verdicts": {
        "node1": {"verdict": "REJECTED", "reasons": ["node1:gpu0: ECC errors (test_gpu[node1])"]},
        "node2": {"verdict": "ACCEPTED", "reasons": []},
        "node3": {"verdict": "REJECTED", "reasons": ["node3: DRAIN (bad DIMM)"]},
        "node4": {"verdict": "REJECTED", "reasons": []},
    }
}


def test_each_rejected_node_is_drained_with_its_first_reason_but_not_one_slurm_excluded():
    asked: list[tuple[str, str]] = []

    def drain(node: str, reason: str) -> None:
        if node == "node4":
            raise SlurmQueryError("scontrol: permission denied")
        asked.append((node, reason))

    done = drain_rejected(codec.decode_nodes(NODES), executor="slurm", excluded={"node3"}, drain=drain)
    assert asked == [("node1", "pytest-gpucluster: rejected: node1:gpu0: ECC errors (test_gpu[node1])")]
    assert done == {
        "node1": {"reason": asked[0][1]},
        "node4": {"error": f"scontrol: permission denied ({right_needed()})"},  # the right the user lacks
    }
    assert drain_rejected(codec.decode_nodes(NODES), executor="local", drain=drain) == {}


def _report(nodeid, outcome, when="call", **entry):
    return SimpleNamespace(
        nodeid=nodeid,
        when=when,
        outcome=outcome,
        failed=outcome == "failed",
        skipped=outcome == "skipped",
        duration=0.1,
        user_properties=[(codec.PROPERTY, entry)] if entry else [],
        longrepr="Failed: node1: planted" if outcome == "failed" else None,
        longreprtext="Failed: node1: planted" if outcome == "failed" else "",
    )


def _results(*reports):
    doc = ResultsDocument(profile="ci", nodes=["node1"])
    for r in reports:
        doc.fold(r)
    return doc


def _finish(results, outputs=None, pytest_status=0, **kwargs):
    drained: list[object] = []

    def drain(nodes):
        drained.append(nodes)
        return {"node1": {"reason": "r"}}

    args = {"interrupted": False, "collect_only": False, "here": "again.json", **kwargs}
    return finish(results, outputs or Outputs(), pytest_status=pytest_status, drain=drain, **args), drained


def test_the_verdict_is_recorded_before_the_nodes_are_drained_once():
    planted = codec.encode_finding(Finding.on_node("node1", "node1: planted"))
    results = _results(_report("a::test_gpu[node1]", "failed", kind="finding", **planted))
    status, drained = _finish(results, Outputs(drain_failed=True), pytest_status=1)
    assert status == 1 and results.status == "complete" and results.finished
    acc = results.extra["acceptance"]
    assert acc["verdict"] == "REJECTED" and acc["nodes"]["verdicts"]["node1"]["verdict"] == "REJECTED"
    # the node verdicts drained are those recorded
    assert drained == [codec.decode_nodes(acc["nodes"])] and results.extra["drained"] == {"node1": {"reason": "r"}}


def test_without_drain_failed_nothing_is_drained_and_collecting_acts_on_nothing():
    results = _results(_report("a::t", "failed"))
    assert _finish(results, pytest_status=1)[1] == [] and "drained" not in results.extra
    collected = _results()
    status, drained = _finish(collected, Outputs(drain_failed=True), pytest_status=5, collect_only=True)
    assert status == 5 and drained == [] and collected.extra["acceptance"]["verdict"] == "INCOMPLETE"


def test_a_test_that_never_reported_makes_an_interrupted_run_incomplete():
    results = _results(_report("a::t1", "passed"))
    results.record("a::t2")
    status, _ = _finish(results, pytest_status=2, interrupted=True)
    assert status == 2 and results.status == "interrupted"
    assert results.tests["a::t2"].outcome == "interrupted"
    assert results.extra["acceptance"]["verdict"] == "INCOMPLETE"
    assert _finish(_results(_report("a::t1", "skipped")), pytest_status=0)[0] == EXIT_INCOMPLETE

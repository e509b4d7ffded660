"""A fault outside the nodes in the verdict (``verdict.run``, ``verdict.nodes``): the checks it stopped are not
judged, the run is INCOMPLETE with the fault's one sentence first, and no node is rejected,
excluded or drained for it; a check that judged something still rejects."""

from __future__ import annotations

from types import SimpleNamespace

from pytest_gpucluster import verdict
from pytest_gpucluster.results import codec
from pytest_gpucluster.results.document import ResultsDocument

DOWN = "the Slurm controller (slurmctld) did not answer for 61 s: `sbatch` exited 1: Unable to contact slurm controller"


def _test(nodeid, verdict, params="", fault=None, message=""):
    # The finding a fault outside the nodes stands for: on the check's node, else every tested node.
    found = (
        {
            "text": fault["sentence"],
            "scope": "controller",
            "nodes": [params] if params else ["node1", "node2"],
            "culprits": [],
            "severity": "not_judged",
        }
        if fault
        else None
    )
    return {
        "nodeid": nodeid,
        "node": params,
        "findings": [found] if found else [],
        "area": nodeid.split("::")[0].removeprefix("test_").removesuffix(".py"),
        "name": nodeid.split("::")[-1].split("[")[0],
        "params": params,
        "verdict": verdict,
        "message": message,
        "measurements": [],
        "problems": [],
        "unjudged": f"cluster fault: {fault['what']}" if fault else "",
        "cluster_fault": fault,
    }


def _doc(tests):
    return {"status": "complete", "nodes": ["node1", "node2"], "tests": tests, "environment": {}, "inventory": {}}


FAULT = {"what": "slurmctld", "sentence": DOWN}
STOPPED = [
    _test(f"test_inventory.py::test_node[{n}]", "fault", params=n, fault=FAULT, message="DaemonUnreachable: " + DOWN)
    for n in ("node1", "node2")
] + [_test(f"test_nccl.py::test_sweep_{i}", "fault", fault=FAULT) for i in range(4)]


def test_checks_stopped_by_the_controller_are_not_judged_and_the_sentence_comes_first():
    acc = verdict.acceptance(
        codec.decode_run(_doc([_test("test_slurm_health.py::test_partition_is_up", "pass"), *STOPPED]))
    )
    assert acc.verdict == "INCOMPLETE"
    assert acc.headline == f"INCOMPLETE: {DOWN} (6 checks not judged)"
    assert acc.reasons == (  # one line, not one per check
        f"{DOWN} (6 checks not judged: test_inventory.py::test_node[node1], "
        "test_inventory.py::test_node[node2], test_nccl.py::test_sweep_0 and 3 more)",
    )


def test_no_node_is_rejected_excluded_or_drained_for_it():
    nodes = verdict.node_verdicts(codec.decode_run(_doc(STOPPED)))
    assert {v.node: v.verdict for v in nodes.verdicts} == {"node1": "INCOMPLETE", "node2": "INCOMPLETE"}
    assert nodes.exclude == ""
    assert nodes.cluster_wide == ()
    assert nodes.summary == "0 of 2 nodes accepted; not judged in full: node[1-2]"


def test_a_judged_failure_still_rejects_with_the_fault_named_first():
    failed = _test("test_slurm_health.py::test_controller_answers", "fail", message="Failed: " + DOWN)
    acc = verdict.acceptance(codec.decode_run(_doc([failed, *STOPPED])))
    assert acc.verdict == "REJECTED"
    assert acc.reasons[0].startswith(DOWN + " (6 checks not judged")
    assert acc.headline == f"REJECTED: 1 check failed; {DOWN} (6 checks not judged)"
    assert verdict.node_verdicts(codec.decode_run(_doc([failed, *STOPPED]))).exclude == ""


WORKER_TEXT = "[gw1] linux -- Python 3.11.7 /venv/bin/python\nSharedFsFault: shared_fs '/mnt/s' cannot be written"


def test_the_fault_entry_of_a_report_marks_its_record_not_judged():
    doc = ResultsDocument(profile="ci")
    entry = {"kind": "cluster_fault", "what": "shared_fs", "sentence": "shared_fs '/mnt/s' cannot be written"}
    report = SimpleNamespace(
        nodeid="test_placement.py::test_x",
        when="setup",
        outcome="failed",
        failed=True,
        skipped=False,
        duration=0.1,
        user_properties=[(codec.PROPERTY, entry)],
        longrepr=WORKER_TEXT,
        longreprtext=WORKER_TEXT,
    )
    record = codec.encode_test(doc.fold(report))
    assert record["cluster_fault"] == {"what": "shared_fs", "sentence": "shared_fs '/mnt/s' cannot be written"}
    assert record["unjudged"] == "cluster fault: shared_fs" and record["verdict"] == "fault"
    assert record["message"] == "SharedFsFault: shared_fs '/mnt/s' cannot be written"  # xdist's worker line gone

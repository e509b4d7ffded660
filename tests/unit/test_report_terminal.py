"""The verdict's summary at the end of the terminal output (``report/terminal.py``), from the
results' verdict entries alone."""

from __future__ import annotations

from pytest_gpucluster.report import terminal

ACC = {
    "verdict": "REJECTED",
    "headline": "REJECTED: 1 check failed",
    "reasons": ["node1:gpu0: ECC errors (test_gpu.py::test_ecc[node1])"],
    "warnings": [],
    "not_applicable": ["test_nccl.py::test_intra: 1 GPU per node", "test_nvlink.py::test_x: 1 GPU per node"],
    "counts": {"pass": 3, "fail": 1, "n/a": 2, "skip": 0},
    "nodes": {
        "summary": "1 of 2 nodes accepted; rejected: node1",
        "exclude": "node1",
        "verdicts": {"node1": {"verdict": "REJECTED"}, "node2": {"verdict": "ACCEPTED"}},
    },
}
NO_JOBS = {"jobs": 0}


def test_a_rejected_run_names_its_nodes_what_was_drained_and_why():
    drained = {"node1": {"reason": "pytest-gpucluster: rejected: node1:gpu0: ECC errors"}}
    shown = terminal.summary({"acceptance": ACC, "drained": drained}, NO_JOBS)
    assert shown.headline == "gpucluster: REJECTED: 1 check failed (3 pass, 1 fail, 2 n/a)"
    assert shown.colour == {"red": True}
    assert shown.lines == [
        ("nodes: 1 of 2 nodes accepted; rejected: node1 (sbatch --exclude=node1)", True),
        (
            "drained node1 (--gpucluster-drain-failed): reason 'pytest-gpucluster: rejected: node1:gpu0: ECC errors'",
            False,
        ),
        ("  node1:gpu0: ECC errors (test_gpu.py::test_ecc[node1])", False),
        ("not applicable: 2 check(s)", False),
        ("  2 × 1 GPU per node", False),
    ]


def test_an_incomplete_run_is_yellow():
    acc = {**ACC, "verdict": "INCOMPLETE", "headline": "INCOMPLETE: 1 reason", "not_applicable": []}
    assert terminal.summary({"acceptance": acc}, NO_JOBS).colour == {"yellow": True}

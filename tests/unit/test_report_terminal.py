"""The verdict's summary at the end of the terminal output (``report/terminal.py``), from the
results' verdict entries alone."""

from __future__ import annotations

import shlex

from pytest_gpucluster.report import terminal
from pytest_gpucluster.report.node_fixes import NodeFixes, SettingFix

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


def test_a_run_that_did_not_accept_a_node_says_how_to_re_test_it_and_merge():
    # The command of the recorded 2 x 2 H200 run with GEMMs on node2's GPU (REJECTED: node2).
    command = ["--cluster=testbox-2x2", "--gpucluster-results=out/results.json", "--html", "out/page.html", "-m", "a b"]
    said = terminal.retest_command(command, "slurm", ACC["nodes"])
    assert said == (
        "pytest --cluster=testbox-2x2 --gpucluster-results=out/results-retest.json --html out/page-retest.html "
        "-m 'a b' --gpucluster-merge-results=out/results.json"
    )
    shown = terminal.summary({"acceptance": ACC}, NO_JOBS, retest=said)
    assert shown.lines[1] == (
        f"to re-test the nodes not accepted (once repaired) and merge the verdicts: {said}",
        False,
    )
    # A re-test that still did not accept a node: the same command again, once repaired.
    again = [*command, "--gpucluster-merge-results=out/earlier.json"]
    assert terminal.retest_command(again, "slurm", ACC["nodes"]) == "pytest " + shlex.join(again)
    # Nothing to say: every node accepted, no results file, or no Slurm to pick nodes from.
    accepted = {"verdicts": {"node1": {"verdict": "ACCEPTED"}}}
    assert terminal.retest_command(command, "slurm", accepted) is None
    narrowed = {"verdicts": {"node1": {"verdict": "PARTIAL"}}}  # a selection, not a fault
    assert terminal.retest_command(command, "slurm", narrowed) is None
    assert terminal.retest_command(command[:1], "slurm", ACC["nodes"]) is None
    assert terminal.retest_command(command, "local", ACC["nodes"]) is None
    assert not any("re-test" in text for text, _ in terminal.summary({"acceptance": ACC}, NO_JOBS).lines)


def test_settings_to_fix_come_before_the_reasons_per_node_with_the_change():
    memlock = SettingFix(
        "RLIMIT_MEMLOCK", "64 KiB", "16 GiB or more (RDMA)", "LimitMEMLOCK=infinity", "fail", (), ("t",)
    )
    ecc = SettingFix("ECC mode", "off", "on (node_config.ecc)", "nvidia-smi -e 1", "fail", (0, 3), ("t",))
    fixes = [NodeFixes("node1", (memlock, ecc), ("test_nccl.py::test_ib[node1]",))]
    lines = [text for text, _ in terminal.summary({"acceptance": ACC}, NO_JOBS, fixes=fixes).lines]
    assert lines[1:5] == [
        "node configuration to fix first (it may explain the findings below):",
        "  node1: fail RLIMIT_MEMLOCK: 64 KiB, expected 16 GiB or more (RDMA); to change: LimitMEMLOCK=infinity",
        "  node1: fail ECC mode (GPU 0, 3): off, expected on (node_config.ecc); to change: nvidia-smi -e 1",
        "  node1: also failed or warned: test_nccl.py::test_ib[node1]",
    ]
    assert lines.index("  node1:gpu0: ECC errors (test_gpu.py::test_ecc[node1])") > 4
    # Many nodes' settings: the first ones, then how many more the report holds.
    many = [NodeFixes(f"node{i}", (memlock,), ()) for i in range(terminal.SETTINGS_SHOWN + 3)]
    lines = [text for text, _ in terminal.summary({"acceptance": ACC}, NO_JOBS, fixes=many).lines]
    assert sum(" RLIMIT_MEMLOCK: " in text for text in lines) == terminal.SETTINGS_SHOWN
    assert "  ... and 3 more setting(s) (see the report or the results file)" in lines


def test_settings_that_only_warn_come_after_the_reasons():
    swap = SettingFix("swap", "8 GiB", "0", "swapoff -a", "warn", (), ("t",))
    fixes = [NodeFixes("node1", (swap,), ("test_gpu.py::test_ecc[node1]",))]
    lines = [text for text, _ in terminal.summary({"acceptance": ACC}, NO_JOBS, fixes=fixes).lines]
    reason = lines.index("  node1:gpu0: ECC errors (test_gpu.py::test_ecc[node1])")
    assert reason == 1, lines  # the culprit right under the node summary
    assert "node configuration to fix first (it may explain the findings below):" not in lines
    title = lines.index("node configuration to change (no check failed for it):")
    assert title > reason
    assert lines[title + 1] == "  node1: warn swap: 8 GiB, expected 0; to change: swapoff -a"

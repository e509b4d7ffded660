"""squeue and sacct read as Slurm writes them, from outputs recorded on the project's test cluster
(slurm-wlm 22.05.8; tests/data/README.md): job names holding a '|' leave every other field where
it is, accounting's record is read from ``sacct --json``, and the node listing asks one command
for the nodes it needs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_gpucluster import slurm
from pytest_gpucluster.errors import SlurmQueryError
from pytest_gpucluster.slurm import node_info, queue
from pytest_gpucluster.slurm.retry import Outages

DATA = Path(__file__).parents[1] / "data" / "slurm"


def _answer(monkeypatch: pytest.MonkeyPatch, answers: dict[str, str], calls: list[list[str]]) -> None:
    """Slurm's client commands answer with the recorded output for the first words of argv."""

    def recorded(argv: list[str], timeout_s: float) -> str:
        calls.append(argv)
        for start, text in answers.items():
            if " ".join(argv).startswith(start):
                if text.startswith("!"):
                    raise SlurmQueryError(f"`{' '.join(argv)}` exited 1: {text[1:]}")
                return text
        raise AssertionError(f"no recorded answer for {argv}")

    monkeypatch.setattr(slurm.commands, "_run_once", recorded)


def test_a_job_name_with_a_bar_stays_the_name_and_the_state_and_nodes_stay_theirs(monkeypatch):
    calls: list[list[str]] = []
    _answer(monkeypatch, {"squeue": (DATA / "squeue-22.05-holders-name-with-bar.txt").read_text()}, calls)
    (held,) = slurm.holders(slurm.Slurm(), ("node1",))
    assert held == slurm.Holder("1", "train|llm v2", "RUNNING", ("node1",), "root")
    assert held.describe() == "job 1 of root (train|llm v2), RUNNING on node1"
    assert calls == [
        ["squeue", "-h", "-t", "RUNNING,COMPLETING,CONFIGURING,SUSPENDED", "-w", "node1", "-o", "%i|%T|%N|%u|%j"]
    ]


def test_a_pending_job_asking_for_a_node_by_name_is_found_whatever_its_name(monkeypatch):
    calls: list[list[str]] = []
    _answer(monkeypatch, {"squeue": (DATA / "squeue-22.05-pending-name-with-bar.txt").read_text()}, calls)
    client = slurm.Slurm()
    assert slurm.queued_for(client, ("node1",)) == [slurm.Holder("2", "eval|x", "PENDING", ("node1",), "root")]
    assert slurm.queued_for(client, ("node2",)) == []


def test_this_users_queue_keeps_whole_names(monkeypatch):
    _answer(monkeypatch, {"squeue": (DATA / "squeue-22.05-me-name-with-bar.txt").read_text()}, [])
    assert slurm.my_queue(slurm.Slurm()) == {"2": "eval|x", "1": "train|llm v2"}


def test_a_line_without_all_fields_is_no_job():
    assert slurm.parse_holders("noise\n\n3|RUNNING|node2\n") == []


def test_accounting_gives_a_jobs_nodes_from_its_json_record(monkeypatch):
    calls: list[list[str]] = []
    _answer(
        monkeypatch,
        {
            "sacct --json -j 1": (DATA / "sacct-22.05-json-job.json").read_text(),
            "sacct --json -j 2": (DATA / "sacct-22.05-json-pending-cancelled.json").read_text(),
            "sacct --json -j 999999": (DATA / "sacct-22.05-json-unknown.json").read_text(),
        },
        calls,
    )
    client = slurm.Slurm()
    assert queue.accounted_nodes(client, "1") == "node1"
    assert queue.accounted_nodes(client, "2") == "None assigned"  # cancelled while it waited
    # Accounting has no record yet: "Nothing found with query" in its errors, and no job.
    assert queue.accounted_nodes(client, "999999") == ""
    assert calls == [["sacct", "--json", "-j", j] for j in ("1", "2", "999999")]


def test_a_sacct_without_json_output_is_read_as_one_field_of_text_from_then_on(monkeypatch):
    # What a Slurm client without --json prints (recorded: 22.05's scontrol).
    refusal = "!" + (DATA / "scontrol-22.05-json-unsupported.stderr.txt").read_text().splitlines()[0]
    calls: list[list[str]] = []
    _answer(
        monkeypatch,
        {"sacct --json": refusal, "sacct -X": (DATA / "sacct-22.05-nodelist-text.txt").read_text()},
        calls,
    )
    client = slurm.Slurm()
    assert queue.accounted_nodes(client, "1") == "node1"
    assert queue.accounted_nodes(client, "1") == "node1"
    assert [c[1] for c in calls] == ["--json", "-X", "-X"]
    assert client.sacct_text_only  # learned by this run's client, not by the module


def test_a_sacct_that_cannot_reach_accounting_is_not_taken_for_one_without_json(monkeypatch):
    _answer(monkeypatch, {"sacct": "!sacct: error: Problem talking to the database: Connection refused"}, [])
    client = slurm.Slurm(Outages(0.0))  # no retry
    with pytest.raises(SlurmQueryError):
        queue.accounted_nodes(client, "1")
    assert not client.sacct_text_only


def test_nodes_are_listed_by_the_one_command_that_lists_them_here(monkeypatch):
    calls: list[list[str]] = []
    _answer(monkeypatch, {"sinfo --json": (DATA / "sinfo-22.05-healthy.json").read_text()}, calls)
    client = slurm.Slurm()
    assert [n.name for n in slurm.nodes(client)] == ["node1", "node2"]
    # Slurm 22.05's sinfo --json lists every node whatever it is asked: the run keeps those it needs.
    assert [n.name for n in slurm.nodes(client, ["node2"])] == ["node2"]
    assert client.node_source == "sinfo"
    assert calls == [["sinfo", "--json"], ["sinfo", "--json"]]  # never also scontrol


def test_where_sinfo_lists_no_nodes_scontrol_is_asked_for_the_nodes_needed():
    assert node_info.scontrol_nodes_argv(["node9", "node10", "node11"]) == [
        "scontrol",
        "--json",
        "show",
        "nodes",
        "node[9-11]",
    ]
    assert node_info.scontrol_nodes_argv([]) == ["scontrol", "--json", "show", "nodes"]


class _Waited:
    def __init__(self, job_id: str) -> None:
        self.job_id = job_id


def test_the_watcher_reads_the_nodes_of_the_run_not_the_cluster(monkeypatch):
    from pytest_gpucluster.launch.watcher import SlurmWatcher

    calls: list[list[str]] = []

    def read(client, names):
        calls.append(list(names))
        return [n for n in slurm.parse_nodes(json.loads(text)) if n.name in names]

    text = (DATA / "sinfo-22.05-node2-drained.json").read_text()
    monkeypatch.setattr(slurm, "nodes", read)
    watcher = SlurmWatcher()
    watcher.watch(_Waited("7"), ("node1", "node2"))
    assert watcher.unusable(["node2"]) == {"node2": "IDLE+DRAIN (integration test)"}
    assert watcher.unusable(["node1"]) == {}  # the same listing serves
    assert calls == [["node1", "node2"]]

"""``run.produce.answered``: a light job on every node whose partner was lost before it started
(cancelled while PENDING, no node answered) is run once more, on the others; what cannot be had
again raises the first evidence."""

from __future__ import annotations

import pytest

from pytest_gpucluster.errors import NodeLostError
from pytest_gpucluster.launch import TaskResult
from pytest_gpucluster.run.produce import answered

PENDING_ON_NODE2 = "job 29 (node-probe): cannot start while PENDING: node2 is IDLE+NOT_RESPONDING; cancelled at once"


def _result(node: str) -> TaskResult[str]:
    return TaskResult(job_id="30", node=node, rank=0, local_rank=0, node_rank=0, value=f"read on {node}")


class Tries:
    """What each submission of the job does, in order: results, or a NodeLostError."""

    def __init__(self, *outcomes: list[TaskResult[str]] | NodeLostError) -> None:
        self.outcomes = list(outcomes)
        self.calls = 0

    def __call__(self) -> list[TaskResult[str]]:
        outcome = self.outcomes[self.calls]
        self.calls += 1
        if isinstance(outcome, NodeLostError):
            raise outcome
        return outcome


def _lost(message: str, *nodes: str, answered_by: tuple[str, ...] = ()) -> NodeLostError:
    err = NodeLostError(message, lost=dict.fromkeys(nodes, "IDLE+NOT_RESPONDING"))
    err.answered = [_result(n) for n in answered_by]
    return err


def test_a_job_cancelled_while_pending_for_a_lost_partner_runs_again_on_the_others():
    run = Tries(_lost(PENDING_ON_NODE2, "node2"), [_result("node1")])
    assert [r.node for r in answered(run)] == ["node1"]
    assert run.calls == 2


def test_the_nodes_that_answered_are_kept_and_nothing_runs_again():
    run = Tries(_lost("node2 lost while RUNNING", "node2", answered_by=("node1",)))
    assert [r.node for r in answered(run)] == ["node1"] and run.calls == 1


def test_a_second_try_refused_for_the_same_loss_raises_the_first_evidence():
    # Pinned to node2, or every node lost: the second try is refused without a submission.
    first = _lost(PENDING_ON_NODE2, "node2")
    run = Tries(first, _lost("node-probe: not submitted: node2: IDLE+NOT_RESPONDING", "node2"))
    with pytest.raises(NodeLostError) as raised:
        answered(run)
    assert raised.value is first and run.calls == 2


def test_a_second_try_that_loses_another_node_says_so():
    run = Tries(_lost(PENDING_ON_NODE2, "node2"), _lost("node3 lost while RUNNING", "node3"))
    with pytest.raises(NodeLostError, match="node3 lost while RUNNING"):
        answered(run)


def test_a_second_try_some_nodes_answer_is_kept():
    run = Tries(_lost(PENDING_ON_NODE2, "node2"), _lost("node3 lost", "node3", answered_by=("node1",)))
    assert [r.node for r in answered(run)] == ["node1"]

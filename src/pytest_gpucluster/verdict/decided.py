"""The run's verdicts, decided once from its typed results (``check.RunRecord``): the run's
verdict, each node's and the node × check matrix, as the results record them under ``acceptance``
(``results/finish.py`` records them; the report renders them back from ``Recorded``)."""

from __future__ import annotations

from dataclasses import dataclass

from pytest_gpucluster.verdict.attribution import Matrix, matrix, placements
from pytest_gpucluster.verdict.check import RunRecord
from pytest_gpucluster.verdict.nodes import Nodes, node_verdicts
from pytest_gpucluster.verdict.run import Acceptance, acceptance


@dataclass(frozen=True)
class Recorded:
    """A run's verdicts: decided now (``decided``), or as a results document records them; the
    report reads these and decides nothing again."""

    acceptance: Acceptance
    nodes: Nodes
    matrix: Matrix


def decided(run: RunRecord) -> Recorded:
    """The run's verdict and its reasons, each node's verdict, and the node × check matrix, all
    from one attribution of the tests' findings."""
    acc = acceptance(run)
    placed = placements(run)
    return Recorded(acc, node_verdicts(run, acc.verdict, placed), matrix(run, placed))

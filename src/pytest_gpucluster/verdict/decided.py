"""The run's verdicts, decided once from its typed results (``check.RunRecord``), as the results record them under
``acceptance`` (``results/finish.py`` records them; the report renders them back with ``Recorded``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pytest_gpucluster.verdict.attribution import Matrix, matrix, placements
from pytest_gpucluster.verdict.check import RunRecord
from pytest_gpucluster.verdict.nodes import Nodes, node_verdicts
from pytest_gpucluster.verdict.run import Acceptance, acceptance


def decided(run: RunRecord) -> dict[str, Any]:
    """The ``acceptance`` entry of the run's results: the run's verdict and its reasons, each
    node's verdict, and the node × check matrix, all from one attribution of the tests' findings."""
    acc = acceptance(run)
    placed = placements(run)
    return {
        **acc.to_json(),
        "nodes": node_verdicts(run, acc.verdict, placed).to_json(),
        "matrix": matrix(run, placed).to_json(),
    }


@dataclass(frozen=True)
class Recorded:
    """A results document's recorded verdicts, as the report reads them: nothing is decided again."""

    acceptance: Acceptance
    nodes: Nodes
    matrix: Matrix

    @classmethod
    def of(cls, doc: Mapping[str, Any]) -> Recorded:
        """The verdicts ``doc`` records (``decided``); KeyError for a document without them."""
        entry = doc["acceptance"]
        return cls(Acceptance.from_json(entry), Nodes.from_json(entry["nodes"]), Matrix.from_json(entry["matrix"]))

"""The run's verdicts, decided once from a results document, as the results record them under
``acceptance`` (``finish.py`` records them; the report renders them back with ``Recorded``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pytest_gpucluster.verdict.attribution import Matrix, matrix, placements
from pytest_gpucluster.verdict.nodes import Nodes, node_verdicts
from pytest_gpucluster.verdict.run import Acceptance, acceptance


def decided(doc: Mapping[str, Any]) -> dict[str, Any]:
    """The ``acceptance`` entry of ``doc``: the run's verdict and its reasons, each node's verdict,
    and the node × check matrix, all from one attribution of the tests' findings."""
    acc = acceptance(doc)
    placed = placements(doc)
    return {
        **acc.to_json(),
        "nodes": node_verdicts(doc, acc.verdict, placed).to_json(),
        "matrix": matrix(doc, placed).to_json(),
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

"""Judging a collective sweep on the login node: which row of a ``SweepResult`` a verdict rests
on, and the words that say how it was chosen. The sweep's arithmetic and result types, which
the nodes use, are in ``workloads.busbw``.
"""

from __future__ import annotations

from collections.abc import Sequence

from pytest_gpucluster.workloads.busbw import SizeResult, human_bytes


def describe_judged(row: SizeResult, judge_from_bytes: int, sizes: Sequence[int]) -> str:
    """How the judged value was chosen, for the failure message."""
    top = max(sizes) if sizes else 0
    basis = (
        f"min busbw over sizes ≥ {human_bytes(judge_from_bytes)}"
        if top >= judge_from_bytes
        else f"largest size measured ({human_bytes(top)} < judge_from {human_bytes(judge_from_bytes)})"
    )
    return f"{basis}, at {human_bytes(row.size_bytes)} {row.place}"

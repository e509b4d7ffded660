"""Training stability: how evenly a long run's steps took their time, per node (login side, pure).

A synchronous data-parallel step ends when its slowest rank ends, so a node's time for step i is
the longest of its ranks' times for it. Two numbers per node are judged: the coefficient of
variation of those step times (standard deviation / mean: a node that throttles, swaps or shares
its GPUs with another job spreads them) and the slowest step over the median one (a single stall:
a page fault storm, a checkpoint on a slow filesystem, a collective that waited for a straggler).
Warm-up steps are not timed (workloads/training.py), so compilation and allocator start-up count
against neither.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from pytest_gpucluster.verdict import Finding, Measurement
from pytest_gpucluster.workloads.training import RunStats

CV_METRIC = "train.stability.step_time_cv"
SLOWEST_METRIC = "train.stability.slowest_step_ratio"


@dataclass(frozen=True)
class StepStability:
    """One node's step times over a long run, summarised."""

    node: str
    steps: int
    median_s: float
    cv_percent: float
    slowest_ratio: float
    slowest_step: int  # index among the timed steps

    def measurements(self, detail: str = "", job_id: str | None = None) -> list[Measurement]:
        """The two judged numbers of the node, each with the steps behind it in the detail."""
        base = f"{self.steps} steps, median {self.median_s * 1e3:.3g} ms" + (f"; {detail}" if detail else "")
        slowest = f"{base}; slowest is step {self.slowest_step}"
        return [
            Measurement.at(CV_METRIC, self.cv_percent, "%", self.node, detail=base, job_id=job_id),
            Measurement.at(SLOWEST_METRIC, self.slowest_ratio, "ratio", self.node, detail=slowest, job_id=job_id),
        ]


def node_step_times(runs: Sequence[RunStats]) -> dict[str, tuple[float, ...]]:
    """node → per timed step, the longest of its ranks' times for that step."""
    by_node: dict[str, list[tuple[float, ...]]] = {}
    for r in runs:
        by_node.setdefault(r.node, []).append(r.step_times_s)
    out: dict[str, tuple[float, ...]] = {}
    for node, per_rank in by_node.items():
        steps = min(len(t) for t in per_rank)
        out[node] = tuple(max(t[i] for t in per_rank) for i in range(steps))
    return out


def time_findings(times: dict[str, tuple[float, ...]]) -> list[Finding]:
    """A node with too few step times to judge, or one that is not a finite positive number:
    each a failure of its node."""
    found = []
    for node, ts in sorted(times.items()):
        bad = [i for i, t in enumerate(ts) if not (math.isfinite(t) and t > 0)]
        if bad:
            found.append(Finding.on_node(node, f"{node}: step {bad[0]} took {ts[bad[0]]!r} s, not a time"))
        elif len(ts) < 2:
            found.append(Finding.on_node(node, f"{node}: {len(ts)} timed step(s); the spread needs at least 2"))
    return found


def stability(node: str, times: Sequence[float]) -> StepStability:
    """The spread of ``times`` (at least 2 finite positive step times, see ``time_findings``)."""
    mean = statistics.fmean(times)
    median = statistics.median(times)
    slowest = max(range(len(times)), key=lambda i: times[i])
    return StepStability(
        node=node,
        steps=len(times),
        median_s=median,
        cv_percent=100.0 * statistics.pstdev(times) / mean,
        slowest_ratio=times[slowest] / median,
        slowest_step=slowest,
    )

"""The handover verdict of a re-test merged into an earlier run's results (``--gpucluster-merge-results``).
Pure: the earlier run's node verdicts and this run's verdicts in, the merged ``Handover`` out."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from pytest_gpucluster.verdict.attribution import CLUSTER_ROW, Matrix
from pytest_gpucluster.verdict.check import Column
from pytest_gpucluster.verdict.nodes import Nodes, NodeVerdict, nodes_summary
from pytest_gpucluster.verdict.ranges import hostlist


def _passed_for(m: Matrix, node: str, col: Column) -> bool:
    """Whether check ``col`` passed for ``node`` in the re-test: on its row, or, where it put
    nothing on the node's row, on the cluster row (a check over every node of the run at once
    that passed names no node: it passed for each of them)."""
    mine = m.cell(node, col).status
    if mine != "none":
        return mine in ("pass", "warn")
    return m.cell(CLUSTER_ROW, col).status in ("pass", "warn")


def _unfinished(was: NodeVerdict) -> bool:
    """Whether an earlier verdict leaves unknown what the node would pass: left out or lost
    (``unfinished``), or not accepted with no check named (PARTIAL in a partial run, or a results
    file written before ``unfinished`` was recorded)."""
    return was.unfinished or (was.verdict != "ACCEPTED" and not was.checks and not was.unjudged)


# The fewest nodes a check across nodes runs on: a re-test of fewer brings accepted partners.
ACROSS_NODES = 2


def retest_choice(verdicts: Mapping[str, str]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """What a re-test runs on, from the earlier run's node → verdict: the nodes it did not accept,
    and beside them accepted partners, the first in the earlier run's order, enough that every
    check across nodes runs for them (a repaired node is judged by the checks that decided it),
    and at least one: where two nodes are left and one still fails, the checks across nodes need
    a node known good beside the other to tell whose fault a failure is."""
    left = tuple(n for n, v in verdicts.items() if v != "ACCEPTED")
    accepted = [n for n, v in verdicts.items() if v == "ACCEPTED"]
    wanted = max(ACROSS_NODES - len(left), 1 if left else 0)
    return left, tuple(accepted[:wanted])


@dataclass(frozen=True)
class Merged:
    """One node's verdict in the handover and the results it is from (the earlier run's or this one's)."""

    node: NodeVerdict
    source: str


@dataclass(frozen=True)
class Handover:
    """A re-test merged with an earlier run: the verdict over every node of both, each node's
    verdict and where it is from, the nodes re-tested and the accepted partners beside them."""

    verdict: str
    summary: str
    exclude: str  # the rejected nodes as a Slurm hostlist
    retested: tuple[str, ...]
    partners: tuple[str, ...]
    earlier: str
    earlier_started: str | None
    this_run: str
    cluster_wide: tuple[str, ...]
    nodes: tuple[Merged, ...]


def handover(
    earlier: Nodes, earlier_ref: str, now: Nodes, m: Matrix, now_ref: str, *, earlier_started: str | None = None
) -> Handover:
    """The handover verdict of a re-test (its node verdicts ``now`` and matrix ``m``) merged with
    an earlier run's node verdicts (``--gpucluster-merge-results``).

    A node this run tested takes this run's verdict, and an ACCEPTED or PARTIAL one counts as
    ACCEPTED only when every check that decided its earlier verdict, or left it not judged, ran
    again and passed (INCOMPLETE otherwise, naming those checks). A node the earlier run did not
    test in full (left out, lost, a partial run, or not in it) has no such list: only this run's
    own ACCEPTED, every check run, accepts it (the checks a lost node never reached are listed as
    its failures, and one with nothing to measure now is not applicable, not a failure). A node
    the earlier run accepted and this run tested beside them (a partner, ``retest_choice``) keeps
    its earlier verdict unless it now fails. A node this run did not test keeps its earlier
    verdict. Failures the earlier run could pin on no node stand until a run without them.
    ACCEPTED only when every node is; REJECTED when any node is."""
    before = {v.node: v for v in earlier.verdicts}
    after = {v.node: v for v in now.verdicts}
    merged: dict[str, Merged] = {}
    partners: list[str] = []
    for node in dict.fromkeys([*before, *after]):
        if node not in after:
            merged[node] = Merged(before[node], earlier_ref)
            continue
        was = before.get(node)
        if was is not None and was.verdict == "ACCEPTED":
            partners.append(node)
            failed_now = after[node].verdict == "REJECTED"
            merged[node] = Merged(after[node], now_ref) if failed_now else Merged(was, earlier_ref)
            continue
        mine = after[node]
        # Not tested in full before: this run's own verdict stands, ACCEPTED only with every check run.
        whole_needed = was is None or _unfinished(was)
        if whole_needed and mine.verdict == "PARTIAL":
            if was is None:
                earlier_said = "the earlier run did not test it"
            elif was.verdict == "PARTIAL":
                earlier_said = "the earlier run selected only some checks (PARTIAL)"
            else:
                earlier_said = f"the earlier run did not test it in full ({was.verdict}: left out or lost)"
            reason = (
                f"{node}: {earlier_said}, and this re-test selected only some checks: only a re-test "
                "of every check (no -k, -m or test paths narrowing the run) can accept it"
            )
            mine = replace(mine, verdict="INCOMPLETE", reasons=(reason,))
        elif was is not None and not whole_needed and mine.verdict in ("PARTIAL", "ACCEPTED"):
            passed = {col[1] for col in m.columns if _passed_for(m, node, col)}
            deciding = (*was.checks, *was.unjudged)
            missing = [c for c in deciding if c not in passed]
            if missing:
                reason = (
                    f"{node}: the re-test did not pass again {', '.join(missing)}, which decided "
                    f"its earlier verdict ({was.verdict}); a check across "
                    "nodes needs an accepted node beside it: re-test without --gpucluster-nodes (the run "
                    "adds accepted partners) or name one there"
                )
                mine = replace(mine, verdict="INCOMPLETE", reasons=(reason,))
            else:
                mine = replace(mine, verdict="ACCEPTED")
        merged[node] = Merged(mine, now_ref)
    wide = tuple(dict.fromkeys([*earlier.cluster_wide, *now.cluster_wide]))
    verdicts = {n: str(v.node.verdict) for n, v in merged.items()}
    rejected = [n for n, v in verdicts.items() if v == "REJECTED"]
    unsure = [n for n, v in verdicts.items() if v not in ("ACCEPTED", "REJECTED")]
    verdict = "REJECTED" if rejected else "INCOMPLETE" if unsure or wide else "ACCEPTED"
    return Handover(
        verdict=verdict,
        summary=nodes_summary(verdicts, len(wide)),
        exclude=hostlist(rejected),
        retested=tuple(n for n in merged if n in after and n not in partners),
        partners=tuple(partners),
        earlier=earlier_ref,
        earlier_started=earlier_started,
        this_run=now_ref,
        cluster_wide=wide,
        nodes=tuple(merged.values()),
    )

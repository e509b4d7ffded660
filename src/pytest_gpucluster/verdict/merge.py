"""The handover verdict of a re-test merged into an earlier run's results (``--gpucluster-merge-results``).
Pure: two results documents in, the ``handover`` entry of the results out."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pytest_gpucluster.verdict.attribution import CLUSTER_ROW, Matrix, matrix
from pytest_gpucluster.verdict.check import Column, RunRecord
from pytest_gpucluster.verdict.nodes import nodes_summary
from pytest_gpucluster.verdict.ranges import hostlist


def _passed_for(m: Matrix, node: str, col: Column) -> bool:
    """Whether check ``col`` passed for ``node`` in the re-test: on its row, or, where it put
    nothing on the node's row, on the cluster row (a check over every node of the run at once
    that passed names no node: it passed for each of them)."""
    mine = m.cell(node, col).status
    if mine != "none":
        return mine in ("pass", "warn")
    return m.cell(CLUSTER_ROW, col).status in ("pass", "warn")


# The fewest nodes a check across nodes runs on: a re-test of fewer brings accepted partners.
ACROSS_NODES = 2


def retest_choice(verdicts: Mapping[str, str]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """What a re-test runs on, from the earlier run's node → verdict: the nodes it did not accept,
    and beside them accepted partners, the first in the earlier run's order, enough that every
    check across nodes runs for them (a repaired node is judged by the checks that decided it)."""
    left = tuple(n for n, v in verdicts.items() if v != "ACCEPTED")
    accepted = [n for n, v in verdicts.items() if v == "ACCEPTED"]
    wanted = max(0, min(ACROSS_NODES, len(verdicts)) - len(left))
    return left, tuple(accepted[:wanted])


def handover(earlier: Mapping[str, Any], earlier_ref: str, doc: Mapping[str, Any], now_ref: str) -> dict[str, Any]:
    """The handover verdict of a re-test merged with an earlier run (``--gpucluster-merge-results``).

    A node this run tested takes this run's verdict, and an ACCEPTED or PARTIAL one counts as
    ACCEPTED only when every check that decided its earlier verdict ran again and passed (INCOMPLETE
    otherwise, naming those checks). A node the earlier run accepted and this run tested beside
    them (a partner, ``retest_choice``) keeps its earlier verdict unless it now fails. A node this
    run did not test keeps its earlier verdict. Failures the earlier run could pin on no node stand
    until a run without them. ACCEPTED only when every node is; REJECTED when any node is."""
    before = ((earlier.get("acceptance") or {}).get("nodes") or {}).get("verdicts") or {}
    now_acc = doc.get("acceptance") or {}
    now = (now_acc.get("nodes") or {}).get("verdicts") or {}
    m = matrix(RunRecord.from_json(doc))
    merged: dict[str, dict[str, Any]] = {}
    partners: list[str] = []
    for node in dict.fromkeys([*before, *now]):
        if node not in now:
            merged[node] = {**before[node], "from": earlier_ref}
            continue
        if (before.get(node) or {}).get("verdict") == "ACCEPTED":
            partners.append(node)
            failed_now = now[node].get("verdict") == "REJECTED"
            merged[node] = {**now[node], "from": now_ref} if failed_now else {**before[node], "from": earlier_ref}
            continue
        mine = dict(now[node])
        if mine.get("verdict") in ("PARTIAL", "ACCEPTED"):
            passed = {col[1] for col in m.columns if _passed_for(m, node, col)}
            deciding = (before.get(node) or {}).get("checks") or []
            missing = [c for c in deciding if c not in passed]
            if missing:
                mine = {
                    **mine,
                    "verdict": "INCOMPLETE",
                    "reasons": [
                        f"{node}: the re-test did not pass again {', '.join(missing)}, which decided "
                        f"its earlier verdict ({(before.get(node) or {}).get('verdict')}); a check across "
                        "nodes needs an accepted node beside it: re-test without --gpucluster-nodes (the run "
                        "adds accepted partners) or name one there"
                    ],
                }
            else:
                mine = {**mine, "verdict": "ACCEPTED"}
        merged[node] = {**mine, "from": now_ref}
    earlier_wide = list(((earlier.get("acceptance") or {}).get("nodes") or {}).get("cluster_wide") or [])
    wide = list(dict.fromkeys([*earlier_wide, *((now_acc.get("nodes") or {}).get("cluster_wide") or [])]))
    verdicts = {n: str(v["verdict"]) for n, v in merged.items()}
    rejected = [n for n, v in verdicts.items() if v == "REJECTED"]
    unsure = [n for n, v in verdicts.items() if v not in ("ACCEPTED", "REJECTED")]
    verdict = "REJECTED" if rejected else "INCOMPLETE" if unsure or wide else "ACCEPTED"
    retested = [n for n in merged if n in now and n not in partners]
    return {
        "verdict": verdict,
        "summary": nodes_summary(verdicts, len(wide)),
        "exclude": hostlist(rejected),
        "retested": retested,
        "partners": partners,
        "earlier": earlier_ref,
        "earlier_started": earlier.get("started"),
        "this_run": now_ref,
        "cluster_wide": wide,
        "nodes": merged,
    }

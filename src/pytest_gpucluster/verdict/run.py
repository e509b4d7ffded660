"""The run's acceptance verdict from its results document: ACCEPTED, REJECTED, INCOMPLETE or
PARTIAL, the reasons for it, the counts behind it and the warnings. Pure: the run's typed
results (``check.RunRecord``) in, a frozen dataclass out; no pytest, no HTML.

The verdict rule (also in docs/report.md), over the run's *required set* (``plan/selection.py``):

* REJECTED   a selected check failed, or errored on the cluster (a job failed, a submission was
  refused); an unexpected pass of a strict xfail counts as a failure;
* INCOMPLETE otherwise, when a required check that was selected was skipped, errored before it
  could judge (a fault of the harness), was stopped by a fault outside the nodes (``launch/faults.py``:
  the controller, the shared filesystem, other work in the queue; one reason per fault, its
  sentence first, and the headline names the first), or was not reached (the run was
  interrupted), or when no check passed;
* PARTIAL    otherwise, when the selection (``-k``, ``-m``, ``--deselect``, files or tests named on
  the command line) left required checks out: what ran passed, but it is not the acceptance;
* ACCEPTED   otherwise: every required check ran and passed; warnings are counted and listed.

A check that does not apply to the profile's shape (``n/a``) is neither required nor missing.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

from pytest_gpucluster.outcomes import JUDGED_BAD, first_line, reason_of
from pytest_gpucluster.verdict.attribution import known_nodes
from pytest_gpucluster.verdict.check import CheckResult, RunRecord
from pytest_gpucluster.verdict.findings import FailureLine, failure_lines, test_label
from pytest_gpucluster.verdict.fold import fold, fold_lines

Overall = Literal["ACCEPTED", "REJECTED", "INCOMPLETE", "PARTIAL"]


@dataclass(frozen=True)
class Acceptance:
    """The run's overall verdict, the reasons for it and the counts behind it."""

    verdict: Overall
    reasons: tuple[str, ...]
    counts: Mapping[str, int]
    headline: str = ""  # "ACCEPTED, 2 warnings", "PARTIAL: 10 selected checks passed; ..."
    warnings: tuple[str, ...] = ()
    not_applicable: tuple[str, ...] = ()  # "<check>: <reason>", one per check that does not apply
    not_selected: tuple[str, ...] = ()
    findings: tuple[FailureLine, ...] = ()  # the failures of a REJECTED run, one line per check and cause


COUNTED = ("pass", "warn", "fail", "xfail", "xpass", "n/a", "not_judged", "fault", "interrupted")


def acceptance(run: RunRecord) -> Acceptance:
    """Apply the verdict rule of this module's docstring to the run's results."""
    tests = run.tests
    by_id = {t.nodeid: t for t in tests}
    nodes = known_nodes(run)
    counts = dict.fromkeys(COUNTED, 0)
    for t in tests:
        counts[t.verdict] = counts.get(t.verdict, 0) + 1
    sel = run.selection
    # The checks of this run that did not apply: the same tests ``counts["n/a"]`` counts, each with
    # the reason known at collection (the selection) or found when it ran.
    known_why = (sel or {}).get("not_applicable", {})
    not_applicable = [
        f"{test_label(t.nodeid)}: " + str(known_why.get(t.nodeid) or t.not_applicable)
        for t in tests
        if t.verdict == "n/a"
    ]
    warned = tuple(
        dict.fromkeys(
            FailureLine(f"{f.text} ({test_label(t.nodeid)})", f.count, t.nodeid).line
            for t in tests
            if t.verdict == "warn"
            for f in fold(
                dict.fromkeys(
                    [*t.warnings, *(v.sentence for v in t.of_status("warn")), *(x.text for x in t.findings_of("warn"))]
                    or ["warnings"]
                ),
                nodes,
            )
        )
    )

    def made(
        verdict: Overall,
        reasons: Iterable[str],
        headline: str,
        not_selected: Iterable[str] = (),
        found: Iterable[FailureLine] = (),
    ) -> Acceptance:
        return Acceptance(
            verdict,
            tuple(reasons),
            counts,
            headline,
            warned,
            tuple(not_applicable),
            tuple(not_selected),
            tuple(found),
        )

    faults = fault_reasons(tests)
    bad = [t for t in tests if t.verdict in JUDGED_BAD]
    if bad:
        found = [f for t in bad for f in failure_lines(t, nodes)]
        n = len(bad)
        headline = f"REJECTED: {n} check{'s' if n != 1 else ''} failed"
        if faults:  # what stopped the other checks is named in the headline too
            headline += f"; {fault_reasons(tests, short=True)[0]}"
        return made("REJECTED", [*faults, *(f.line for f in found)], headline, found=found)

    reasons: list[str] = list(faults)
    faulted = {t.nodeid for t in tests if t.verdict == "fault"}
    if run.status != "complete":
        reasons.append(f"the run did not finish (status: {run.status}); results cover only the checks that ran")
    not_selected: list[str] = []
    if sel is not None:
        skipped_out = set(sel.get("not_selected", []))
        not_selected = [test_label(n) for n in sel.get("not_selected", [])]
        for nodeid in sel.get("required", []):
            if nodeid in skipped_out or nodeid in faulted:
                continue
            reasons += _missing(nodeid, by_id.get(nodeid))
    else:  # a results file without a selection: every check in it is taken as required
        for t in tests:
            if t.nodeid not in faulted:
                reasons += _missing(t.nodeid, t)
    narrowed = sel is not None and bool(not_selected or sel.get("named"))
    if counts["pass"] + counts["warn"] == 0 and not narrowed:
        reasons.append("no acceptance check passed")
    if reasons:
        reasons = fold_lines(reasons, nodes)
        n = len(reasons)
        headline = f"INCOMPLETE: {n} reason{'s' if n != 1 else ''} the acceptance is not whole"
        if faults:  # the fault outside the nodes is what a reader must see first
            more = n - 1
            headline = f"INCOMPLETE: {fault_reasons(tests, short=True)[0]}" + (
                f" (and {more} more reason{'s' if more != 1 else ''})" if more else ""
            )
        return made("INCOMPLETE", reasons, headline, not_selected)
    passed = counts["pass"] + counts["warn"]
    w = f", {len(warned)} warning{'s' if len(warned) != 1 else ''}" if warned else ""
    if sel is not None and narrowed:
        parts = [f"{passed} selected check{'s' if passed != 1 else ''} passed{w}"]
        if not_selected:
            parts.append(f"{len(not_selected)} required check{'s' if len(not_selected) != 1 else ''} not selected")
        named = list(sel.get("named", []))
        why = [f"the command line names {', '.join(named)}: checks outside it were not collected"] if named else []
        why += [f"{n}: not selected" for n in not_selected]
        return made("PARTIAL", why, "PARTIAL: " + "; ".join(parts), not_selected)
    return made("ACCEPTED", warned, f"ACCEPTED{w}")


def fault_reasons(tests: Iterable[CheckResult], *, short: bool = False) -> list[str]:
    """One line per fault outside the nodes (``launch/faults.py``) that stopped checks, its sentence
    first, then how many checks it kept from being judged: "the Slurm controller (slurmctld)
    stopped answering at 10:14:05 UTC (...) (26 checks not judged: test_a, test_b, test_c and 23
    more)"; ``short``: without naming the checks (for a headline)."""
    stopped: dict[str, list[str]] = {}
    for t in tests:
        if t.verdict == "fault":
            said = t.stopped.said if t.stopped is not None else "a fault outside the nodes"
            stopped.setdefault(said, []).append(test_label(t.nodeid))
    out = []
    for sentence, labels in stopped.items():
        count = f"{len(labels)} check{'s' if len(labels) != 1 else ''} not judged"
        shown = ", ".join(labels[:3]) + (f" and {len(labels) - 3} more" if len(labels) > 3 else "")
        out.append(f"{sentence} ({count})" if short else f"{sentence} ({count}: {shown})")
    return out


def _missing(nodeid: str, t: CheckResult | None) -> list[str]:
    """Why a required check has no judgement, or nothing when it has one."""
    label = test_label(nodeid)
    if t is None:
        return [f"{label}: not reached (the run ended before it)"]
    kept = [f.text for f in t.findings_of("not_judged")]
    if t.verdict == "not_judged" and t.unjudged:
        return [f"{label}: could not be judged ({t.unjudged}): {first_line(t.message)}"]
    if t.verdict == "not_judged":
        said = "; ".join(dict.fromkeys(kept)) or reason_of(t.message) or "no reason given"
        return [f"{label}: not judged: {said}"]
    if t.verdict == "interrupted":
        why = f": {'; '.join(dict.fromkeys(kept))}" if kept else ""
        return [f"{label}: interrupted before it was judged{why}"]
    return []


def stopped_by_faults_only(run: RunRecord) -> bool:
    """Whether every check pytest saw fail or error was stopped by a fault outside the nodes (the
    controller, the shared filesystem, other work): none of them is a judgement or a harness error."""
    return all(t.verdict == "fault" for t in run.tests if t.outcome in ("failed", "error"))

"""The acceptance verdict at the end of the terminal output: the headline in the verdict's
colour, the node summary, the node configuration to fix first (``report/node_fixes.py``), the
handover summary, what was drained, the reasons (or warnings), the settings that only warn, the
checks that do not apply, where the time went, the baseline comparison and the calibration file.
Pure: the results document and what the run compared and wrote in, lines out."""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_gpucluster.report.node_fixes import NodeFixes, failing
from pytest_gpucluster.results.baseline import Comparison
from pytest_gpucluster.results.timing import start_up_note
from pytest_gpucluster.verdict import hostlist


@dataclass
class Summary:
    """The headline (a separator line in the verdict's colour) and the lines below it, each with
    whether it is bold."""

    headline: str
    colour: dict[str, bool]
    lines: list[tuple[str, bool]] = field(default_factory=list)

    def line(self, text: str, *, bold: bool = False) -> None:
        """Add a line."""
        self.lines.append((text, bold))


# How the verdict line counts each outcome (outcomes.decide).
COUNT_WORDS = {"not_judged": "not judged", "fault": "stopped by a fault", "interrupted": "interrupted"}


RESULTS_OPTION = "--gpucluster-results"
MERGE_OPTION = "--gpucluster-merge-results"
# Files a re-test would write over the earlier run's: each gets its own name beside the earlier one.
RENAMED = (RESULTS_OPTION, "--html")


def _option_value(args: Sequence[str], option: str) -> tuple[int, str] | None:
    """(index, value) of ``option`` in ``args``, as ``--opt=value`` or ``--opt value``; the last given."""
    found = None
    for i, arg in enumerate(args):
        if arg.startswith(f"{option}="):
            found = (i, arg.split("=", 1)[1])
        elif arg == option and i + 1 < len(args):
            found = (i, args[i + 1])
    return found


def _beside(path: str) -> str:
    """``results.json`` → ``results-retest.json``."""
    p = Path(path)
    return str(p.with_name(f"{p.stem}-retest{p.suffix}"))


def retest_command(command: Sequence[str], executor: str, nodes: Mapping[str, Any]) -> str | None:
    """What to run once the nodes this run did not accept are repaired: the same command with
    ``--gpucluster-merge-results`` naming this run's results file, which re-tests just those nodes
    beside an accepted partner and merges the verdicts (the results and page get names of their
    own, so the earlier run's are kept); a run that was itself such a re-test, the same command
    again. None where no node was rejected or left not judged (a node PARTIAL only by the
    selection has nothing to repair), the profile is not a Slurm one (a re-test picks Slurm
    nodes) or the run wrote no results file."""
    verdicts = nodes.get("verdicts") or {}
    if executor != "slurm" or not any(v.get("verdict") in ("REJECTED", "INCOMPLETE") for v in verdicts.values()):
        return None
    args = list(command)
    results = _option_value(args, RESULTS_OPTION)
    if results is None:
        return None
    if _option_value(args, MERGE_OPTION) is None:
        for option in RENAMED:
            given = _option_value(args, option)
            if given is None:
                continue
            i, value = given
            if args[i] == option:
                args[i + 1] = _beside(value)
            else:
                args[i] = f"{option}={_beside(value)}"
        args.append(f"{MERGE_OPTION}={results[1]}")
    return "pytest " + shlex.join(args)


# Settings shown in the terminal before the rest is left to the report.
SETTINGS_SHOWN = 12


def node_settings(fixes: Sequence[NodeFixes], title: str, out: Summary) -> None:
    """Node configuration under ``title``, per node: each setting with the value found, the
    value expected and the change, then the node's other checks that failed or warned (the
    symptoms it may explain); up to ``SETTINGS_SHOWN`` settings, then how many more."""
    if not fixes:
        return
    out.line(title, bold=True)
    shown = 0
    for n in fixes:
        if shown == SETTINGS_SHOWN:
            break
        for fix in n.fixes[: SETTINGS_SHOWN - shown]:
            gpus = f" (GPU {', '.join(map(str, fix.gpus))})" if fix.gpus else ""
            out.line(
                f"  {n.node}: {fix.severity} {fix.setting}{gpus}: {fix.found}, expected {fix.expected}; "
                f"to change: {fix.remedy}"
            )
            shown += 1
        if n.symptoms:
            out.line(f"  {n.node}: also failed or warned: {', '.join(n.symptoms)}")
    left = sum(len(n.fixes) for n in fixes) - shown
    if left > 0:
        out.line(f"  ... and {left} more setting(s) (see the report or the results file)")


def summary(
    doc: Mapping[str, Any],
    timing: Mapping[str, Any],
    *,
    comparison: Comparison | None = None,
    baseline_path: Path | None = None,
    calibrated_path: Path | None = None,
    retest: str | None = None,
    fixes: Sequence[NodeFixes] = (),
) -> Summary:
    """The summary of a run from ``doc``, its results document or the verdict entries in it
    (``acceptance``, ``handover``, ``drained``), and ``timing``, the run's ``timing`` entry;
    ``retest``: the command that re-tests the nodes not accepted (``retest_command``);
    ``fixes``: the node configuration to change (``node_fixes.node_fixes``): a node's failing
    settings ahead of the reasons they may explain, settings that only warn after them (the
    culprit of a failure comes first)."""
    acc = doc["acceptance"]
    counts = ", ".join(f"{n} {COUNT_WORDS.get(k, k)}" for k, n in acc["counts"].items() if n)
    colour = {"ACCEPTED": {"green": True}, "REJECTED": {"red": True}}.get(acc["verdict"], {"yellow": True})
    out = Summary(f"gpucluster: {acc['headline']} ({counts or 'no tests'})", colour)
    nodes = acc.get("nodes") or {}
    if nodes.get("verdicts"):
        exclude = f" (sbatch --exclude={nodes['exclude']})" if nodes.get("exclude") else ""
        out.line(f"nodes: {nodes['summary']}{exclude}", bold=True)
    ahead, later = failing(list(fixes))
    node_settings(ahead, "node configuration to fix first (it may explain the findings below):", out)
    merged = doc.get("handover")
    if merged:
        exclude = f" (sbatch --exclude={merged['exclude']})" if merged.get("exclude") else ""
        out.line(
            f"handover with {merged['earlier']}: {merged['verdict']}: {merged['summary']}{exclude}; "
            f"re-tested now: {hostlist(merged['retested']) or 'none'}",
            bold=True,
        )
        for node, v in merged["nodes"].items():
            if v["verdict"] != "ACCEPTED":
                first = (v.get("reasons") or [f"as judged in {v['from']}, where only the selected checks ran"])[0]
                out.line(f"  {node}: {v['verdict']}: {first}")
    if retest:
        out.line(f"to re-test the nodes not accepted (once repaired) and merge the verdicts: {retest}")
    for node, done in (doc.get("drained") or {}).items():
        said = f"reason {done['reason']!r}" if "reason" in done else f"NOT drained: {done['error']}"
        out.line(f"drained {node} (--gpucluster-drain-failed): {said}")
    shown = acc["reasons"] if acc["verdict"] != "ACCEPTED" else acc["warnings"]
    for reason in shown[:20]:
        out.line(f"  {reason}")
    if len(shown) > 20:
        out.line(f"  ... and {len(shown) - 20} more (see the results file or the report)")
    if acc["verdict"] in ("REJECTED", "INCOMPLETE") and acc["warnings"]:
        out.line(
            f"  and {len(acc['warnings'])} warning(s): {acc['warnings'][0]}"
            + (" ..." if len(acc["warnings"]) > 1 else "")
        )
    node_settings(later, "node configuration to change (no check failed for it):", out)
    if acc["not_applicable"]:
        why: dict[str, int] = {}
        for line in acc["not_applicable"]:
            reason = line.split(": ", 1)[-1]
            why[reason] = why.get(reason, 0) + 1
        out.line(f"not applicable: {len(acc['not_applicable'])} check(s)")
        for reason, n in sorted(why.items(), key=lambda kv: -kv[1]):
            out.line(f"  {n} × {reason}")
    if timing["jobs"]:
        out.line(
            f"time: {timing['wall_s']:.0f} s in all, workloads ran {timing['workload_s']:.0f} s "
            f"({timing['jobs']} jobs), harness {timing['harness_s']:.0f} s "
            f"({100 * (timing['harness_fraction'] or 0):.0f} %)"
        )
        parts = timing.get("harness_parts") or {}
        if parts:
            out.line(
                f"harness: {parts['scheduling_s']:.1f} s submission to first process, {parts['start_up_s']:.1f} s "
                f"process start-up, {parts['pickup_s']:.1f} s result pickup, {parts['between_jobs_s']:.1f} s "
                "between jobs"
            )
        waited = start_up_note(timing)
        if waited:
            out.line(waited)
    if comparison is not None:
        c = comparison
        out.line(
            f"baseline {baseline_path}: {len(c.changes)} compared, {len(c.failed)} regression(s) past "
            f"the fail line, {len(c.warned)} past the warn line"
        )
        for change in (c.failed + c.warned)[:20]:
            out.line(f"  {change.verdict.status}: {change.verdict.sentence}")
    if calibrated_path is not None:
        out.line(f"calibrated thresholds written to {calibrated_path}")
    return out

"""The run's end, once its last test has ended: the results' status and end time are settled, the
verdicts decided (``verdict/``) and recorded, then acted on: the rejected nodes drained
(``--gpucluster-drain-failed``), a re-test merged into the earlier run (``--gpucluster-merge-results``), and the exit
status given. In that order, once: what is drained and what the exit status says follow the
verdict recorded in the results.

No pytest: the session's ``pytest_sessionfinish`` calls ``finish`` with pytest's status and sets the
status it returns.
"""

from __future__ import annotations

from collections.abc import Callable

from pytest_gpucluster import verdict
from pytest_gpucluster.config.options import Outputs
from pytest_gpucluster.results import codec
from pytest_gpucluster.results.document import ResultsDocument

Drain = Callable[[verdict.Nodes], dict[str, dict[str, str]]]


def record_verdicts(results: ResultsDocument, run: verdict.RunRecord) -> verdict.Recorded:
    """Decide the run's and the nodes' verdicts from the checks' typed results, once, and record
    them in the results under ``acceptance``: the run's verdict and its reasons, each node's
    verdict, and the node × check matrix the report renders."""
    decided = verdict.decided(run)
    results.extra["acceptance"] = codec.encode_decided(decided)
    return decided


def finish(
    results: ResultsDocument,
    outputs: Outputs,
    *,
    pytest_status: int,
    interrupted: bool,
    collect_only: bool,
    drain: Drain,
    here: str,
) -> int:
    """End the run's results (``ResultsDocument.close``), record its verdicts and act on them;
    the exit status. ``here`` names this run's results in a handover (its ``--gpucluster-results`` file);
    ``drain`` drains the rejected nodes (``drain.drain_rejected``). A run that only collected
    (``--collect-only``, ``--gpucluster-dry-run``) judged nothing: its verdict is recorded, nothing is
    acted on and pytest's status stands."""
    results.close(interrupted=interrupted)
    run = results.run_record()
    decided = record_verdicts(results, run)
    if collect_only:
        return pytest_status
    if outputs.drain_failed:
        results.extra["drained"] = drain(decided.nodes)
    handover = None
    if outputs.merge_doc is not None and outputs.merge_path is not None:
        earlier = outputs.merge_doc
        handover = verdict.handover(
            codec.decode_nodes((earlier.get("acceptance") or {}).get("nodes") or {}),
            str(outputs.merge_path),
            decided.nodes,
            decided.matrix,
            here,
            earlier_started=earlier.get("started"),
        )
        results.extra["handover"] = codec.encode_handover(handover)
    return verdict.exit_status(
        decided.acceptance.verdict,
        pytest_status,
        faults_only=verdict.stopped_by_faults_only(run),
        handover=handover.verdict if handover is not None else None,
    )

"""``python -m pytest_gpucluster.report RESULTS.json [-o REPORT.html]``: the acceptance report
from a results file alone (a CI artifact, a run from another machine), without pytest-html."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from pytest_gpucluster.report.handover import ResultsFile
from pytest_gpucluster.report.html import render_page
from pytest_gpucluster.results.codec import decode_recorded, load, with_verdicts
from pytest_gpucluster.verdict import exit_status


def main(argv: list[str] | None = None) -> int:
    """Render the page; exit as the run did: 0 ACCEPTED or PARTIAL, 1 REJECTED, 10 INCOMPLETE; 3 for
    a file that is not a results file."""
    parser = argparse.ArgumentParser(prog="python -m pytest_gpucluster.report", description=__doc__)
    parser.add_argument("results", type=Path, help="a --gpucluster-results file of pytest-gpucluster")
    parser.add_argument("-o", "--output", type=Path, default=None, help="HTML file (default: RESULTS with .html)")
    args = parser.parse_args(argv)
    try:
        doc = with_verdicts(load(args.results))
    except (OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 3
    out = args.output or args.results.with_suffix(".html")
    out.write_text(render_page(doc, results_file=ResultsFile.of(args.results)), encoding="utf-8")
    acc = decode_recorded(doc).acceptance
    print(f"{acc.headline}: {out}")
    return exit_status(acc.verdict)


if __name__ == "__main__":
    sys.exit(main())

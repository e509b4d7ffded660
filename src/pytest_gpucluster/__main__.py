"""``python -m pytest_gpucluster init [DIR]``: a site's own starting thresholds.toml, written out from
the one this installation ships, in ``DIR`` (default: the working directory). A run there reads it
(the rootdir's thresholds.toml comes before the shipped one); edit its profile for the cluster, or
calibrate lines from known-good runs (``--gpucluster-calibrate``, docs/report.md).

``python -m pytest_gpucluster metrics RESULTS [-o PATH]``: the verdicts and figures of a results file
in the Prometheus text format (what ``--gpucluster-metrics`` writes at a run's end), to standard
output or to ``PATH`` (node_exporter's textfile collector reads ``*.prom`` files)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from pytest_gpucluster.config.shipped import default_thresholds
from pytest_gpucluster.results import codec, metrics


def main(argv: list[str] | None = None) -> int:
    """Write DIR/thresholds.toml; 1 (nothing written) when it exists or the installation ships none."""
    parser = argparse.ArgumentParser(prog="python -m pytest_gpucluster", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    init = sub.add_parser("init", help="write the shipped thresholds.toml into DIR to start a site's own")
    init.add_argument("dir", nargs="?", type=Path, default=Path.cwd(), help="where (default: here)")
    prom = sub.add_parser("metrics", help="a results file's verdicts and figures in the Prometheus text format")
    prom.add_argument("results", type=Path, help="a --gpucluster-results file")
    prom.add_argument("-o", "--output", type=Path, help="write here (a .prom file) instead of standard output")
    args = parser.parse_args(argv)
    if args.command == "metrics":
        return _metrics(args.results, args.output)
    shipped = default_thresholds()
    target = args.dir / "thresholds.toml"
    if shipped is None:
        print("error: this installation of pytest-gpucluster ships no thresholds.toml", file=sys.stderr)
        return 1
    if target.exists():
        print(f"error: {target} exists; nothing written (move it away to start afresh)", file=sys.stderr)
        return 1
    try:
        args.dir.mkdir(parents=True, exist_ok=True)
        target.write_bytes(shipped.read_bytes())
    except OSError as exc:
        print(f"error: {target}: {exc.strerror or exc}; nothing written", file=sys.stderr)
        return 1
    print(
        f"wrote {target} (from {shipped}). Add a [profiles.NAME] for your cluster (README: thresholds.toml), "
        f"then, in {args.dir}: pytest --cluster=NAME"
    )
    return 0


def _metrics(results: Path, output: Path | None) -> int:
    """Write the metrics of ``results``; 1 (nothing written) when it is no readable results file."""
    try:
        doc = codec.with_verdicts(codec.load(results))
    except (OSError, ValueError) as exc:
        print(f"error: {exc if isinstance(exc, ValueError) else f'{results}: {exc.strerror or exc}'}", file=sys.stderr)
        return 1
    if output is None:
        sys.stdout.write(metrics.exposition(doc))
        return 0
    try:
        metrics.write(output, doc)
    except OSError as exc:
        print(f"error: {output}: {exc.strerror or exc}; nothing written", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

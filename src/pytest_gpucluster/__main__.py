"""``python -m pytest_gpucluster init [DIR]``: a site's own starting thresholds.toml, written out from
the one this installation ships, in ``DIR`` (default: the working directory). A run there reads it
(the rootdir's thresholds.toml comes before the shipped one); edit its profile for the cluster, or
calibrate lines from known-good runs (``--gpucluster-calibrate``, docs/report.md)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from pytest_gpucluster.config.shipped import default_thresholds


def main(argv: list[str] | None = None) -> int:
    """Write DIR/thresholds.toml; 1 (nothing written) when it exists or the installation ships none."""
    parser = argparse.ArgumentParser(prog="python -m pytest_gpucluster", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    init = sub.add_parser("init", help="write the shipped thresholds.toml into DIR to start a site's own")
    init.add_argument("dir", nargs="?", type=Path, default=Path.cwd(), help="where (default: here)")
    args = parser.parse_args(argv)
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


if __name__ == "__main__":
    sys.exit(main())

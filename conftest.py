"""Root conftest: only what running the acceptance suite from a source checkout needs.

The plugin itself is loaded through its ``pytest11`` entry point; this file only turns a missing
install into a clear message instead of "unknown option --cluster".
"""

from __future__ import annotations

import importlib.util

if importlib.util.find_spec("pytest_gpucluster") is None:
    raise SystemExit(
        "pytest-gpucluster is not installed in this Python. Run tools/setup (see README.md), "
        "then use .venv/bin/pytest."
    )

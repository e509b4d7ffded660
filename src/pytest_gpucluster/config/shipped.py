"""What the plugin ships besides its code: the acceptance suite and the default thresholds.toml.

In a wheel they are package data (``pytest_gpucluster/acceptance/``, ``pytest_gpucluster/
thresholds.toml``), copied there at build time from the repository's ``tests/acceptance/`` and
``thresholds.toml`` (``setup.py``): the same files, never a second copy in the source tree. In a
source checkout (an editable install) they are read where the repository keeps them.
"""

from __future__ import annotations

from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1]  # pytest_gpucluster/, this module being in its config/
# The repository's root when this is a source checkout (src/pytest_gpucluster/), else None.
CHECKOUT = (
    PACKAGE.parents[1] if PACKAGE.parent.name == "src" and (PACKAGE.parents[1] / "pyproject.toml").is_file() else None
)


def suite_dir() -> Path | None:
    """The folder of the acceptance checks this installation ships, or None where it has none."""
    places = [PACKAGE / "acceptance"] + ([CHECKOUT / "tests" / "acceptance"] if CHECKOUT else [])
    return next((p for p in places if (p / "test_nccl.py").is_file()), None)


def default_thresholds() -> Path | None:
    """The thresholds.toml this installation ships (profiles and threshold sets), or None."""
    places = [PACKAGE / "thresholds.toml"] + ([CHECKOUT / "thresholds.toml"] if CHECKOUT else [])
    return next((p for p in places if p.is_file()), None)

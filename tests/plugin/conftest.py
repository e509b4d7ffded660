"""Plugin tier: pytester runs of the plugin with submitit's local executor."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def gpc(pytester: pytest.Pytester) -> pytest.Pytester:
    """A pytester directory with the repository's thresholds.toml at its rootdir."""
    shutil.copy(REPO / "thresholds.toml", pytester.path / "thresholds.toml")
    pytester.makeini("[pytest]\naddopts = -p no:cacheprovider\n")
    return pytester

"""Plugin tier: pytester runs of the plugin with submitit's local executor."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def gpc(pytester: pytest.Pytester) -> pytest.Pytester:
    """A pytester directory with the repository's thresholds.toml at its rootdir, whose ini names
    its checks (``testpaths``) and the profile its runs test when no --cluster is given, as this
    repository's pyproject does: the checks it holds run, not the installed suite."""
    shutil.copy(REPO / "thresholds.toml", pytester.path / "thresholds.toml")
    pytester.makeini("[pytest]\naddopts = -p no:cacheprovider\ntestpaths = .\ngpucluster_cluster = local\n")
    return pytester

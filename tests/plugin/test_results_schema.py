"""docs/results-schema.md against a real results file: every key a run writes is documented, so
the schema a customer's tooling reads cannot drift from the code unnoticed."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
SCHEMA = REPO / "docs" / "results-schema.md"
# Containers whose keys are data (node names, metric names, areas, facts), not schema.
DATA_KEYS = {
    *("environment", "inventory", "verdicts", "areas", "lost_nodes", "excluded_nodes", "parts", "counts"),
    *("facts", "not_applicable", "not_planned", "nodes"),
}


def documented() -> set[str]:
    blocks = re.findall(r"```json\n(.*?)```", SCHEMA.read_text(), flags=re.S)
    return {key for block in blocks for key in re.findall(r'"([A-Za-z_][A-Za-z0-9_]*)":', block)}


def written(value: Any, path: str = "") -> set[str]:
    """Every key of the document with where it was found, skipping the data containers' keys."""
    out: set[str] = set()
    if isinstance(value, dict):
        for key, child in value.items():
            out.add(f"{path}.{key}" if path else key)
            if key not in DATA_KEYS:
                out |= written(child, f"{path}.{key}" if path else key)
    elif isinstance(value, list):
        for child in value:
            out |= written(child, path + "[]")
    return out


def test_every_key_a_run_writes_is_in_the_schema(gpc: pytest.Pytester):
    for name in ("test_placement.py", "test_sharedfs.py", "test_inventory.py", "test_compute.py"):
        shutil.copy(REPO / "tests" / "acceptance" / name, gpc.path / name)
    result = gpc.runpytest_subprocess("--gpucluster-results=out.json", "-m", "not slow")
    doc = json.loads((gpc.path / "out.json").read_text())
    assert doc["tests"] and doc["acceptance"] and doc["plan"], result.stdout.str()
    known = documented()
    missing = sorted(p for p in written(doc) if p.rsplit(".", 1)[-1].removesuffix("[]") not in known)
    assert not missing, f"keys written but not in {SCHEMA.name}: {missing}"


def test_every_key_a_soak_writes_is_in_the_schema(gpc: pytest.Pytester):
    # A short soak of CPU ranks: the soak section, its rules with the tables they were read from.
    shutil.copy(REPO / "tests" / "acceptance" / "test_soak.py", gpc.path / "test_soak.py")
    with (gpc.path / "thresholds.toml").open("a") as f:
        f.write("\n[profiles.local.soak]\ncycle_s = 2\nsdc_every = 2\n")
    result = gpc.runpytest_subprocess("--gpucluster-soak=4s", "--gpucluster-results=out.json")
    doc = json.loads((gpc.path / "out.json").read_text())
    assert doc["soak"]["rules"]["drift"]["tables"], result.stdout.str()
    known = documented()
    missing = sorted(p for p in written(doc) if p.rsplit(".", 1)[-1].removesuffix("[]") not in known)
    assert not missing, f"keys written but not in {SCHEMA.name}: {missing}"

"""A check's unset lines are one warning on the page (checks/lines.py): each figure is kept
unjudged and named, the set to add them to is the finding's setting, other findings stay as
they are; a single unset line keeps its own sentence."""

from __future__ import annotations

from pathlib import Path

from pytest_gpucluster.checks.lines import fold_missing, is_missing_line, missing_line
from pytest_gpucluster.config.load import load
from pytest_gpucluster.verdict import Finding

REPO = Path(__file__).resolve().parents[2]


def h200():
    config = load(REPO / "thresholds.toml")
    return config.thresholds_for(config.profile("nebius-h200"))


def test_several_unset_lines_of_one_check_are_one_warning_naming_each():
    lines = h200()
    slow = Finding.on_node("node2", "node2: storage.write_per_node 120 MB/s is below its peers", severity="fail")
    found = [
        missing_line(lines, "storage.write_per_node", ["node1", "node2"], "docs/storage.md"),
        slow,
        missing_line(lines, "storage.read_per_node", ["node1", "node2"], "docs/storage.md"),
    ]
    assert all(is_missing_line(f) for f in (found[0], found[2])) and not is_missing_line(slow)
    folded, kept = fold_missing(found)
    assert kept is slow
    assert folded.severity == "warn" and folded.scope == "config" and not folded.convicts
    assert folded.setting == "thresholds.nebius-h200" and folded.nodes == ("node1", "node2")
    assert folded.text.startswith(
        "2 figures are measured and not judged, no line being set for them in [thresholds.nebius-h200] "
        "nor in [thresholds.default]: storage.write_per_node, storage.read_per_node."
    )
    assert "--gpucluster-calibrate=PATH" in folded.text


def test_one_unset_line_keeps_its_own_sentence():
    only = missing_line(h200(), "storage.metadata_ops", ["node1"], "docs/storage.md says what peers sustain")
    assert fold_missing([only]) == [only]
    assert only.metric == "storage.metadata_ops" and only.setting == "thresholds.nebius-h200.storage.metadata_ops"

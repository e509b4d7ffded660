"""The report's block of the across-node rounds over the switch tree (report/rounds.py,
html.rounds_block), on the synthetic results of 64 nodes under 4 leaves with a slow path between
leaf2 and leaf4 and a slow node37 (tests/data/rounds/make_rounds_sample.py): what was named, the
leaves with their accepted nodes, the leaf-to-leaf heatmap, the slowest groups; and nothing at all
where no rounds ran."""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path

from pytest_gpucluster.report import html, plots, rounds

SAMPLE = Path(__file__).resolve().parents[1] / "data" / "rounds" / "results_64_nodes_4_leaves_synthetic.json"


def sample() -> dict:
    return json.loads(SAMPLE.read_text(encoding="utf-8"))


def test_the_section_names_the_link_and_the_node_and_counts_accepted_nodes_per_leaf():
    (s,) = rounds.sections(sample())
    assert s.op == "all_reduce" and s.fail_below == 40.0
    assert [(n.kind, n.name, n.nodes) for n in s.named] == [
        ("node", "node37", "node37"),
        ("path between two leaves", "leaf2–leaf4", "node[17-32,49-64]"),
    ]
    assert [(r.name, r.nodes, r.accepted, r.named) for r in s.leaves] == [
        ("leaf1", "node[01-16]", 16, False),
        ("leaf2", "node[17-32]", 16, True),
        ("leaf3", "node[33-48]", 15, False),
        ("leaf4", "node[49-64]", 16, True),
    ]
    leaf3 = s.leaves[2]
    assert leaf3.inside is not None and leaf3.inside < 12  # node37's pair
    assert s.summary.startswith("64 nodes under 4 leaves, 5 rounds, 129 groups; named: node node37; ")


def test_the_matrix_holds_the_lowest_busbw_of_every_pair_of_leaves_but_a_named_nodes():
    (s,) = rounds.sections(sample())
    assert s.matrix_labels == ("leaf1", "leaf2", "leaf3", "leaf4")
    m = s.matrix
    assert all(m[i][j] == m[j][i] for i in range(4) for j in range(4))
    assert 18 <= m[1][3] < 21  # the slow path
    assert m[0][1] >= 42 and m[0][0] >= 42
    assert m[2][0] >= 42 and m[2][2] >= 42  # node37's groups are left out: leaf3's paths are fast


def test_the_slowest_groups_come_first_and_say_they_are_under_the_line():
    (s,) = rounds.sections(sample())
    node37 = {g.nodes for g in s.slowest if g.busbw < 12}  # its four groups and the whole cluster
    assert node37 == {"node[37,53]", "node[21,37]", "node[05,37]", "node[37-38]", "node[01-64]"}
    assert all(g.below for g in s.slowest)  # the next six: the slow path leaf2–leaf4
    assert len(s.slowest) == rounds.SLOWEST
    assert [g.busbw for g in s.slowest] == sorted(g.busbw for g in s.slowest)


def test_the_block_shows_the_heatmap_and_the_tables_on_one_page():
    page = html.rounds_block(sample())
    assert page.count('class="gc-rounds-named"') == 1
    assert "leaf2–leaf4" in page and "node[17-32,49-64] (32)" in page
    assert "15 of 16" in page
    (uri,) = re.findall(r'src="(data:image/svg\+xml;base64,[^"]+)"', page)
    svg = base64.b64decode(uri.split(",", 1)[1]).decode()
    assert "leaf4" in svg and "lowest busbw between leaves" in svg


def test_the_heatmap_of_64_leaves_labels_every_tenth_and_stays_small():
    labels = [f"leaf{i}" for i in range(64)]
    cells = [[40.0 + (i + j) % 7 if i != j else None for j in range(64)] for i in range(64)]
    cells[3][9] = cells[9][3] = 10.0
    uri = plots.heatmap("all_reduce", labels, cells, 40.0)
    svg = base64.b64decode(uri.split(",", 1)[1]).decode()
    assert "leaf10" in svg and "leaf11" not in svg
    assert len(uri) < 400_000


def test_no_rounds_no_block():
    doc = sample()
    del doc["tests"][0]["rounds"]
    assert html.rounds_block(doc) == ""

"""Lines that only prove a path (``path_only`` in thresholds.toml): the matrix cells whose every pass
is against such a line (``verdict.attribution.path_cells``), their own look and legend entry in the
node × check matrix, and the JUnit property that says the path was proven rather than passed."""

from __future__ import annotations

import json
import re
from pathlib import Path

from result_docs import document as _doc
from result_docs import measurement as _m
from result_docs import record_of_test as _t

from pytest_gpucluster.report import html, model
from pytest_gpucluster.results import codec
from pytest_gpucluster.verdict.attribution import path_cells

SAMPLES = Path(__file__).resolve().parents[2] / "docs" / "samples"
PATH = {"fail_below": 0.01, "path_only": True}
REAL = {"fail_below": 300.0}


def _doc_with_path_lines() -> dict:
    return _doc(
        [
            # across nodes, judged by a path line only
            _t("a::test_across", "pass", [_m("nccl.x.inter_node", 3.6, "pass", "node1+node2", **PATH)]),
            # a node's check with a real pass beside a path pass: a pass of a speed
            _t(
                "a::test_mixed[node1]",
                "pass",
                [_m("nccl.x.intra_node", 320.0, "pass", "node1", **REAL), _m("nccl.y", 1.0, "pass", "node1", **PATH)],
                node="node1",
            ),
            # a node's check of path lines only
            _t("a::test_path[node2]", "pass", [_m("nccl.y", 1.0, "pass", "node2", **PATH)], node="node2"),
            # a zero on a path line fails like any line
            _t("a::test_zero[node1]", "fail", [_m("nccl.y", 0.0, "fail", "node1", **PATH)], node="node1"),
        ],
        nodes=("node1", "node2"),
    )


def test_a_cell_is_a_path_cell_when_its_every_pass_is_against_a_path_line():
    cells = path_cells(codec.decode_run(_doc_with_path_lines()))
    assert cells == {
        ("node1", ("a", "test_across")),
        ("node2", ("a", "test_across")),
        ("node2", ("a", "test_path")),
    }


def test_a_path_cell_has_its_own_look_and_legend_entry():
    doc = codec.with_verdicts(_doc_with_path_lines())
    page = html.render_page(doc)
    matrix = re.search(r'<section class="gc" id="gc-matrix-section">(.*?)</section>', page, re.S).group(1)
    rows = dict(re.findall(r'<tr><th class="gc-mono">(node\d)</th>(.*?)</tr>', matrix, re.S))
    looks = {n: re.findall(r'class="gc-cell gc-s-([\w-]+)"', cells) for n, cells in rows.items()}
    # columns: test_across, test_mixed, test_path, test_zero
    assert looks == {"node1": ["path", "pass", "none", "fail"], "node2": ["path", "none", "path", "none"]}
    assert '<span class="gc-badge gc-s-path">path only</span>' in matrix


def test_the_split_sample_shows_its_across_node_lines_as_path_cells():
    doc = codec.with_verdicts(json.loads((SAMPLES / "results-2x2-h200-retest-merged.json").read_text()))
    matrix = html.matrix_block(codec.decode_recorded(doc).matrix, path_cells(codec.decode_run(doc)))
    columns = re.findall(r'<th class="gc-col">(.*?)</th>', matrix)
    node1 = re.search(r'<tr><th class="gc-mono">node1</th>(.*?)</tr>', matrix, re.S).group(1)
    look = dict(zip(columns, re.findall(r'class="gc-cell gc-s-([\w-]+)"', node1), strict=True))
    assert look["busbw_across_nodes"] == look["training_across_nodes"] == "path"
    assert look["gpu_compute_and_memory"] == look["training_mfu_on_node"] == "pass"


def test_a_junit_property_of_a_path_line_says_the_path_was_proven():
    props = model.junit_properties(
        [_m("nccl.x.inter_node", 3.6, "pass", "node1+node2", **PATH), _m("nccl.z", 350, "pass", "node1", **REAL)]
    )
    assert props == [
        ("nccl.x.inter_node[node1+node2]", "3.6 GB/s path proven (fail < 0.01 GB/s, a path line, not a speed)"),
        ("nccl.z[node1]", "350 GB/s pass (fail < 300 GB/s)"),
    ]

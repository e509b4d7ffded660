"""One voice across the report, on recorded results: a check that does not apply reads as its
sentence in pytest-html's table (not pytest's ``(path, line, message)`` tuple); the run's count of
checks that ran is the count pytest-html's "N tests took" line gives; a compute row shows its
speed with its unit, not the spread ratio beside it, and, where the GPU's datasheet states the
figure, its share of it; no Python literal anywhere in a page."""

from __future__ import annotations

import html as html_text
import json
import re
from pathlib import Path

import pytest
from soak_dip_docs import dip_doc

from pytest_gpucluster.config.gpu_specs import share, spec_of
from pytest_gpucluster.report import figures, html, model, plots
from pytest_gpucluster.report.pytest_html_hooks import skip_sentence
from pytest_gpucluster.results import codec

SAMPLES = Path(__file__).resolve().parents[2] / "docs" / "samples"
# A Python literal in what a customer reads: a tuple or list of strings, a dict, a skip's tuple.
LITERAL = re.compile(r"\(\s*'|\['|\{'|', '|', \d+, ['\"]")


def sample(name: str) -> dict:
    return codec.with_verdicts(json.loads((SAMPLES / f"results-{name}.json").read_text()))


def visible(page: str) -> str:
    """A page's text as a browser shows it: scripts, styles, images and tags dropped."""
    page = re.sub(r"<(script|style)\b.*?</\1>", " ", page, flags=re.S)
    return html_text.unescape(re.sub(r"<[^>]+>", " ", page))


def test_a_skip_reads_as_its_sentence():
    longrepr = ("/srv/suite/tests/acceptance/test_dcgm.py", 18, "Skipped: not applicable: dcgmi is not installed")
    assert skip_sentence(longrepr) == "Not applicable: dcgmi is not installed"
    assert skip_sentence("a failure's text") is None


def test_the_count_of_checks_that_ran_is_pytest_htmls():
    doc = sample("h100-1gpu-slurm")
    block = html.acceptance_block(doc, codec.decode_recorded(doc))
    # pytest-html counts passed, failed, xpassed and xfailed as "tests took": 29 here
    ran = sum(1 for t in doc["tests"] if t["outcome"] in ("passed", "failed", "xpassed", "xfailed"))
    assert ran == 29
    assert "56 checks in 18 areas: 29 ran, 27 not applicable; compute (1), dcgm (1)," in block
    chips = {k: v for k, v in codec.decode_recorded(doc).acceptance.counts.items() if v}
    assert sum(chips.values()) == len(doc["tests"]) == 56


def test_a_compute_row_shows_its_speed_and_its_share_of_the_spec():
    doc = sample("4xh200-slurm")
    compute = next(t for t in doc["tests"] if t["name"] == "test_gpu_compute_and_memory")
    assert {m["unit"] for m in compute["measurements"]} == {"TFLOP/s", "TB/s", "ratio"}
    cells = model.test_cells(compute, model.gpu_model(doc))
    assert cells.measured == "743.4 TFLOP/s (worst of 4; 75 % of the 989 TFLOP/s spec)"
    key = {k.metric: k for k in figures.key_figures(doc)}
    assert key["compute.matmul_bf16"].spec == "75 % of the 989 TFLOP/s spec"
    assert key["compute.memcopy"].worst == "4.271 TB/s" and key["compute.memcopy"].spec == "89 % of the 4.8 TB/s spec"
    h100 = sample("h100-2node-shared-gpu")
    assert model.gpu_model(h100) == "NVIDIA H100 80GB HBM3"  # the inventory's name, not the profile's "H100"
    key = {k.metric: k for k in figures.key_figures(h100)}
    assert key["compute.memcopy"].spec == "47 % of the 3.35 TB/s spec"


def test_a_failing_ratio_still_heads_its_row():
    test = {
        "verdict": "fail",
        "measurements": [
            {"metric": "compute.matmul_bf16", "value": 700.0, "unit": "TFLOP/s", "status": "pass", "threshold": {}},
            {"metric": "compute.fraction_of_node_median", "value": 0.2, "unit": "ratio", "status": "fail"},
        ],
    }
    assert model.test_cells(test, "NVIDIA H200").measured == "0.2 ratio"


@pytest.mark.parametrize(
    ("name", "known"),
    [
        ("NVIDIA H100 80GB HBM3", 989.0),
        ("NVIDIA H200", 989.0),
        ("NVIDIA H100 PCIe", 756.0),
        ("NVIDIA H100 NVL", 835.0),
        ("NVIDIA H200 NVL", 835.0),
        ("NVIDIA B200", 2250.0),
        ("NVIDIA GB200", None),  # a GB200's B200 runs at another power: not the HGX figure
        ("NVIDIA A100-SXM4-80GB", 312.0),
        ("NVIDIA A100-PCIE-40GB", 312.0),
        ("NVIDIA A100", None),  # the board and memory tell the A100s apart
        ("H100", None),  # the memory tells the SXM board from the others
        ("cpu", None),
    ],
)
def test_only_a_board_known_exactly_has_a_spec(name, known):
    spec = spec_of(name, "compute.matmul_bf16")
    assert (spec.value if spec else None) == known
    assert share(0.9, "ratio", spec) == ""


def test_each_boards_memory_bandwidth_is_its_own():
    bandwidth = {n: spec_of(n, "compute.memcopy") for n in ("NVIDIA A100-SXM4-40GB", "NVIDIA A100 80GB PCIe")}
    assert {n: s.value for n, s in bandwidth.items() if s} == {
        "NVIDIA A100-SXM4-40GB": 1.555,
        "NVIDIA A100 80GB PCIe": 1.935,
    }
    assert share(4.29, "TB/s", spec_of("NVIDIA H200", "compute.memcopy")) == "89 % of the 4.8 TB/s spec"


@pytest.mark.parametrize("name", ["h100-1gpu-slurm", "h100-2node-shared-gpu", "4xh200-slurm", "soak-h200-1gpu", "dips"])
def test_no_python_literal_in_a_page(name):
    doc = dip_doc() if name == "dips" else sample(name)
    text = visible(html.render_page(doc))
    found = LITERAL.search(text)
    assert found is None, text[max(0, found.start() - 200) : found.end() + 200]


@pytest.mark.parametrize("metric", ["compute.fraction_of_node_median", "compute.matmul_bf16"])
def test_the_map_the_plot_and_the_row_name_the_same_lowest_gpu(metric):
    # A GPU's GEMM and copy fractions share one metric name: each part of the page picks the worst.
    doc = sample("4xh200-slurm")
    (gpu_map,) = [m for m in figures.gpu_maps(doc)[0] if m.title == metric]
    (plot,) = [p for p in plots.spread_plots(doc) if p.title == f"{metric} by place"]
    lowest = re.search(r"lowest: (\S+)", gpu_map.note).group(1)  # type: ignore[union-attr]
    assert f"lowest {lowest} = " in plot.caption, (gpu_map.note, plot.caption)
    if metric == "compute.fraction_of_node_median":
        assert lowest == "node1:gpu2"  # GEMM 0.979 of the node median; the copy's last row was gpu1's 0.999

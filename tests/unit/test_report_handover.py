"""The handover sheet is the contract's page (report/handover.py, acceptance.html.j2), read as a
customer reads it, on recorded results: the verdict and every warning in full, what was not
tested and why, the command and the selection, the parties and reference of
``[profiles.NAME.handover]``, the GPUs by serial and UUID, the results file's sha256, page numbers
when printed, and signature boxes only on an ACCEPTED run; no Python literal anywhere."""

from __future__ import annotations

import copy
import hashlib
import html as html_text
import json
import re
from pathlib import Path

import pytest
from soak_dip_docs import dip_doc

from pytest_gpucluster.config.load import load
from pytest_gpucluster.config.profile import Handover
from pytest_gpucluster.errors import ConfigError
from pytest_gpucluster.report import handover, html
from pytest_gpucluster.results import codec

REPO = Path(__file__).resolve().parents[2]
SAMPLES = REPO / "docs" / "samples"
ONE_GPU = SAMPLES / "results-h100-1gpu-slurm.json"  # ACCEPTED, 1 warning, -m 'not slow'
SOAK = SAMPLES / "results-soak-h200-1gpu.json"  # PARTIAL: the soak's file alone
PARTIES = {"customer": "Example Labs GmbH", "provider": "GPU Cloud Ltd", "reference": "PO-2026-0417"}
# A Python literal in what a customer reads: a tuple, a list or a dict of strings.
LITERAL = re.compile(r"\(\s*'|\['|\{'|\"\)|', '")


def doc_of(path: Path, **cluster: object) -> dict:
    doc = codec.with_verdicts(json.loads(path.read_text()))
    doc["cluster"].update(cluster)
    return doc


def sheet_text(doc: dict, results_file: handover.ResultsFile | None = None) -> str:
    """The handover sheet's text as a browser shows it (tags dropped, whitespace collapsed)."""
    block = html.acceptance_block(doc, codec.decode_recorded(doc), results_file)
    sheet = block[block.index('id="gc-handover"') : block.index('class="gc-counts"')]
    text = html_text.unescape(re.sub(r"<[^>]+>", " ", re.sub(r"<br>", "\n", sheet)))
    return re.sub(r"[ \t]+", " ", text)


def test_an_accepted_sheet_states_the_contract_and_has_signatures():
    doc = doc_of(ONE_GPU, handover=PARTIES)
    text = sheet_text(doc, handover.ResultsFile.of(ONE_GPU))
    for label, value in (
        ("Customer", "Example Labs GmbH"),
        ("Provider", "GPU Cloud Ltd"),
        ("Reference", "PO-2026-0417"),
    ):
        assert f"{label} {value}" in text
    # the one warning in full, not just its count
    assert "1 warning (they do not reject; each in full):" in text
    assert "node1: inventory.memory_per_gpu = 125.9 GiB is below the warn line 128 GiB" in text
    assert "Command pytest --cluster=testbox-1gpu -p no:cacheprovider" in text and "-m 'not slow'" in text
    assert "Selection -m 'not slow'" in text
    assert f"sha256 {hashlib.sha256(ONE_GPU.read_bytes()).hexdigest()}" in text
    assert "gpu0 serial 1753024029801, GPU-18ee4f68-33b5-e4f7-7870-32457f18b0c4" in text
    block = html.acceptance_block(doc, codec.decode_recorded(doc))
    assert 'class="gc-signatures"' in block and "Customer</b> (Example Labs GmbH)" in block
    assert "No signatures" not in text
    assert not LITERAL.search(text), LITERAL.search(text)


def test_the_sheet_lists_what_was_not_tested_and_why():
    text = sheet_text(doc_of(ONE_GPU))
    part = text[text.index("Not tested, and why") :]
    # a tool not installed, a shape that does not apply, and the slow checks the selection left out
    assert (
        "not applicable: dcgmi is not installed on node1 and profile 'testbox-1gpu' does not require it "
        "(dcgm_required = false) (1): test_dcgm.py::test_dcgm_diagnostics[node1]"
    ) in part
    assert "not applicable: profile 'testbox-1gpu' has 1 node; this check needs 2 (10): " in part
    assert (
        "optional (slow), not selected: not part of the required set (3): "
        "test_compute.py::test_gpu_burn_without_throttling[node1]"
    ) in part
    recorded = codec.decode_recorded(doc_of(ONE_GPU))
    listed = sum(len(n.checks) for n in handover.not_tested(doc_of(ONE_GPU), recorded))
    assert listed == len(recorded.acceptance.not_applicable) + 3


def test_a_partial_sheet_has_no_signatures_and_says_what_was_not_collected():
    doc = doc_of(SOAK)
    text = sheet_text(doc)
    block = html.acceptance_block(doc, codec.decode_recorded(doc))
    assert "gc-signatures" not in block
    assert "No signatures: a PARTIAL run is not an acceptance." in text
    assert "not collected: the command line names only tests/acceptance/test_soak.py" in text
    assert "Selection named on the command line: tests/acceptance/test_soak.py" in text
    assert "Results file" not in text  # no file given: no hash to state


@pytest.mark.parametrize("verdict", ["REJECTED", "INCOMPLETE"])
def test_no_signatures_on_a_run_that_is_not_an_acceptance(verdict):
    doc = copy.deepcopy(doc_of(ONE_GPU))
    doc["acceptance"]["verdict"] = verdict
    block = html.acceptance_block(doc, codec.decode_recorded(doc))
    assert "gc-signatures" not in block and f"a {verdict} run is not an acceptance" in block


def test_a_soak_with_recovered_dips_lists_every_dip_on_the_sheet():
    text = sheet_text(dip_doc())
    assert "3 warnings (they do not reject; each in full):" in text
    for sentence in (
        "node1:gpu1 GEMM 287 TFLOP/s in cycle 5 (0 h 2 min), −57 % from its level 664, back to 666.2 in cycle 6",
        "node1:gpu1 device copy 1.91 TB/s in cycle 4 (0 h 2 min), −55 % from its level 4.217, back to 4.226 in cycle 5",
        "node1 all_reduce busbw 162 GB/s in cycle 7 (0 h 3 min), −54 % from its level 354, back to 353.6 in cycle 8",
    ):
        assert sentence in text
    assert not LITERAL.search(text)


def test_printed_pages_are_numbered():
    css = html.style()
    assert '@bottom-right { content: "page " counter(page) " of " counter(pages);' in css


def test_the_handover_table_names_the_parties_and_rejects_unknown_keys(tmp_path):
    base = (REPO / "thresholds.toml").read_text()
    good = tmp_path / "good.toml"
    good.write_text(
        base + '\n[profiles.x]\nexecutor = "local"\n[profiles.x.handover]\ncustomer = "Example Labs GmbH"\n'
    )
    assert load(good).profile("x").handover == Handover(customer="Example Labs GmbH")
    assert Handover(customer="A", reference="R").to_json() == {"customer": "A", "reference": "R"}
    bad = tmp_path / "bad.toml"
    bad.write_text(base + '\n[profiles.x]\nexecutor = "local"\n[profiles.x.handover]\nrefrence = "PO-1"\n')
    with pytest.raises(
        ConfigError, match=r"profiles\.x\.handover\.refrence: unknown key\. Perhaps you meant 'reference'\?"
    ):
        load(bad)


def test_reasons_that_differ_only_by_node_are_one_line_naming_the_nodes():
    # the 2×2 split of the 4 × H200 machine: dcgmi and nvbandwidth missing on both nodes
    doc = codec.with_verdicts(json.loads((SAMPLES / "results-2x2-h200-retest-merged.json").read_text()))
    why = [n.why for n in handover.not_tested(doc, codec.decode_recorded(doc))]
    assert any(w.startswith("not applicable: dcgmi is not installed on node[1-2] and profile") for w in why), why
    assert not [w for w in why if "installed on node1" in w or "installed on node2" in w], why
    dcgm = next(n for n in handover.not_tested(doc, codec.decode_recorded(doc)) if "dcgmi" in n.why)
    assert len(dcgm.checks) == 2


def test_key_figures_say_what_they_measured():
    from pytest_gpucluster.report import figures

    doc = codec.with_verdicts(json.loads((SAMPLES / "results-4xh200-local-shapes.json").read_text()))
    key = {k.metric: k for k in figures.key_figures(doc)}
    assert key["compute.matmul_bf16"].measured == "NVIDIA H200, bf16"
    assert "at 1 GiB" in key["nccl.all_reduce.intra_node"].measured
    assert "4 ranks" in key["nccl.all_reduce.intra_node"].measured
    assert "941 M parameters" in key["train.ddp.mfu"].measured

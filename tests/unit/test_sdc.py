"""Silent data corruption: the chain's fingerprint on the CPU path, and judging recorded outputs
(tests/data/sdc, written by its record.py) from a node of four GPUs, one of them corrupted."""

from __future__ import annotations

import json
import pickle
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from pytest_gpucluster.checks import sdc as judge
from pytest_gpucluster.workloads import sdc
from pytest_gpucluster.workloads.context import local_context

DATA = Path(__file__).parent.parent / "data" / "sdc"
H100 = "NVIDIA H100 80GB HBM3"
FLIPPED = 3 * 4096 + 1234  # the element record.py corrupts: block 3, row 52, col 210


def _load(name: str) -> sdc.SdcResult:
    return sdc.SdcResult.from_dict(json.loads((DATA / name).read_text()))


def _gpus(*names: str, model: str = H100, node: str = "node1") -> list[sdc.SdcResult]:
    """A node whose gpuN returned the recorded output ``names[N]``."""
    return [replace(_load(name), node=node, gpu=f"gpu{i}", device_name=model) for i, name in enumerate(names)]


CLEAN = "cpu_tiny.json"


def test_cpu_path_is_bit_identical_twice():
    first = sdc.compute(sdc.TINY)
    second = sdc.compute(sdc.TINY)
    assert first.digest == second.digest and first.block_s1 == second.block_s1
    assert len(first.block_sums) == 256 * 256 // 4096
    # Whatever this CPU's GEMM kernels are, the result is within the float32 tolerance of float64.
    assert judge.findings([first], reference=_load("reference_float64.json")) == []


def test_workload_entry_on_the_cpu_pickles():
    threads = torch.get_num_threads()
    try:
        result = sdc.run(local_context(), config=replace(sdc.TINY, chain=2), backend="gloo")
    finally:
        torch.set_num_threads(threads)  # the entry pins one thread per stand-in rank
    assert result.gpu == "cpu0" and result.device_name.startswith("cpu")
    assert pickle.loads(pickle.dumps(result)) == result


def test_recorded_outputs_round_trip():
    result = _load(CLEAN)
    assert sdc.SdcResult.from_dict(json.loads(json.dumps(result.to_dict()))) == result


def test_identical_gpus_pass():
    results = _gpus(CLEAN, CLEAN, CLEAN, CLEAN)
    assert judge.findings(results) == []
    assert judge.findings(results, reference=_load("reference_float64.json")) == []


def test_low_bit_flip_names_gpu_block_and_element():
    results = _gpus(CLEAN, CLEAN, "cpu_tiny_flip_low_mantissa.json", CLEAN)
    found = judge.findings(results, reference=_load("reference_float64.json"))
    assert len(found) == 1, found  # within tolerance of float64: only bit identity catches it
    clean, bad = results[0], results[2]
    assert (found[0].scope, found[0].nodes, found[0].gpu, found[0].culprits) == ("gpu", ("node1",), 2, ("node1",))
    assert found[0].text.startswith(
        f"node1:gpu2 ({H100}): result differs from the 3 other GPU(s) of its model "
        f"(digest {bad.digest[:12]} vs {clean.digest[:12]}); first differing block 3 of 16 (elements 12288–16383), "
        f"element {FLIPPED} (row 52, col 210) the only one differing in it; 1 block(s) differ in all; "
        f"block sum {bad.block_sums[3]!r} vs {clean.block_sums[3]!r}"
    )


def test_exponent_flip_also_breaks_the_tolerance():
    results = _gpus(CLEAN, "cpu_tiny_flip_exponent.json", CLEAN, CLEAN)
    found = judge.findings(results, reference=_load("reference_float64.json"))
    assert [f.place for f in found] == ["node1:gpu1", "node1:gpu1"]
    assert [f.text.split(" ")[0] for f in found] == ["node1:gpu1", "node1:gpu1"]
    assert f"element {FLIPPED} (row 52, col 210)" in found[0].text
    assert "block 3 (elements 12288–16383) sums to" in found[1].text
    assert "the float64 reference on cpu" in found[1].text and "1 of 16 block(s) out of tolerance" in found[1].text


def test_no_majority_names_every_gpu():
    results = _gpus(CLEAN, "cpu_tiny_flip_low_mantissa.json")
    found = judge.findings(results)
    assert len(found) == 1
    assert found[0].text.startswith(f"2 GPUs of {H100} (float32) disagree with no majority: ")
    assert "node1:gpu0" in found[0].text and "node1:gpu1" in found[0].text
    assert (found[0].scope, found[0].culprits) == ("node", ("node1",))  # neither GPU told apart: their node's
    across = [*_gpus(CLEAN), *_gpus("cpu_tiny_flip_low_mantissa.json", node="node2")]
    (found,) = judge.findings(across)
    assert (found.nodes, found.culprits) == (("node1", "node2"), ())
    assert judge.about_node([found], "node2") == [found] and judge.about_node([found], "node3") == []


def test_other_model_judged_against_the_largest_within_tolerance():
    h100 = _gpus(CLEAN, CLEAN, CLEAN)
    # Another model may round differently (here: the float64 chain) but must agree within tolerance.
    other = replace(_load("reference_float64.json"), node="node2", gpu="gpu0", device_name="NVIDIA H200")
    assert judge.findings([*h100, other]) == []
    corrupt = replace(_load("cpu_tiny_flip_exponent.json"), node="node2", gpu="gpu1", device_name="NVIDIA H200")
    found = judge.findings([*h100, corrupt])
    assert len(found) == 1 and found[0].text.startswith("node2:gpu1 (NVIDIA H200): block 3")
    assert "the answer of the 3 NVIDIA H100 80GB HBM3 GPU(s)" in found[0].text
    assert (found[0].scope, found[0].gpu, found[0].culprits) == ("gpu", 1, ("node2",))
    assert judge.about_node(found, "node1") == [] and judge.about_node(found, "node2") == found


def test_different_sizes_are_not_compared():
    results = _gpus(CLEAN, CLEAN, CLEAN)
    results[1] = replace(results[1], config=replace(results[1].config, chain=9))
    (found,) = judge.findings(results)
    assert found.text == (
        "node1:gpu1: computed n=256, chain=9, seed=20240601, block_elements=4096, the others n=256, chain=8, "
        "seed=20240601, block_elements=4096; not comparable"
    )
    assert (found.scope, found.gpu) == ("gpu", 1)
    reference = replace(_load("reference_float64.json"), config=replace(results[0].config, chain=9))
    (found,) = judge.findings(_gpus(CLEAN, CLEAN), reference=reference)
    assert (found.scope, found.severity, found.convicts) == ("harness", "not_judged", ())


def test_first_difference_of_identical_is_none():
    assert judge.first_difference(_load(CLEAN), _load(CLEAN)) is None


def test_bad_config_is_named():
    with pytest.raises(ValueError, match="sdc dtype 'float16'"):
        sdc.SdcConfig(dtype="float16")
    with pytest.raises(ValueError, match="block_elements=0"):
        sdc.SdcConfig(block_elements=0)


def test_two_elements_of_one_block_are_not_mistaken_for_one():
    with sdc.deterministic(on_gpu=False):
        x, colsum = sdc.chain(sdc.TINY, torch.device("cpu"))
    clean = sdc.fingerprint(x, colsum, sdc.TINY)
    for first, second in ((FLIPPED, FLIPPED + 7), (FLIPPED, FLIPPED + 1)):
        bad = x.clone().reshape(-1)
        bad.view(torch.int32)[first] += 1  # a one-ulp change at ``first`` …
        bad.view(torch.int32)[second] -= 2  # … and two ulps the other way at ``second``
        corrupt = sdc.fingerprint(bad.reshape(x.shape), colsum, sdc.TINY)
        base = sdc.SdcResult(node="node1", gpu="gpu0", device_name=H100, config=sdc.TINY, elapsed_s=0.0, **clean)
        diff = judge.first_difference(replace(base, gpu="gpu1", **corrupt), base)
        assert diff is not None and diff.block == 3 and diff.element is None

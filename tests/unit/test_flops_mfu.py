"""FLOP formula against a hand count, and the bf16 peak table behind MFU."""

from __future__ import annotations

import pytest

from pytest_gpucluster.workloads.flops import (
    ModelShape,
    gpt_param_count,
    mfu_percent,
    peak_bf16_tflops,
    training_flops_per_token,
)


def test_param_count_of_a_small_model_by_hand():
    # d=8, 2 layers, seq 4, vocab 10. Per block: qkv 8·24=192, proj 64, up 8·32=256, down 256,
    # two LayerNorm weights 16 → 784. Embeddings 80 + 32, final LayerNorm 8, head 80.
    assert gpt_param_count(8, 2, 4, 10) == 2 * 784 + 80 + 32 + 8 + 80


def test_default_model_is_the_937m_reference_plus_position_table():
    n = gpt_param_count(2048, 16, 2048, 32000)
    assert n == 940_640_256  # 936.4 M of the reference model + a 2048×2048 position table
    assert 0.935e9 < n - 2048 * 2048 < 0.937e9


def test_training_flops_per_token_by_hand():
    shape = ModelShape(d_model=8, n_layers=2, seq_len=4, vocab=10, n_params=1000)
    # 6·N = 6000; attention 12·L·d·S = 12·2·8·4 = 768
    assert training_flops_per_token(shape) == 6768


def test_mfu_matches_the_reference_measurement():
    # numbers.md: 1 H200, 78.0 k tokens/s, 937 M params (no position table) → 50.7 % of 989 TF.
    shape = ModelShape(2048, 16, 2048, 32000, gpt_param_count(2048, 16, 2048, 32000) - 2048 * 2048)
    mfu = mfu_percent(78_000, training_flops_per_token(shape), 989.0)
    assert mfu == pytest.approx(50.7, abs=0.1)


@pytest.mark.parametrize(
    ("name", "peak"),
    [
        ("NVIDIA H100 80GB HBM3", 989.0),
        ("NVIDIA H100 PCIe", 756.0),
        ("NVIDIA H100 NVL", 835.0),
        ("NVIDIA H200", 989.0),
        ("NVIDIA GH200 480GB", 989.0),
        ("NVIDIA A100-SXM4-80GB", 312.0),
        ("NVIDIA A100-PCIE-40GB", 312.0),
    ],
)
def test_peak_table_lookup_by_nvml_name(name, peak):
    assert peak_bf16_tflops(name) == peak


@pytest.mark.parametrize("name", ["Tesla V100-SXM2-32GB", "cpu", "", None, "NVIDIA GeForce RTX 4090"])
def test_unknown_model_has_no_peak_and_no_mfu(name):
    assert peak_bf16_tflops(name) is None
    assert mfu_percent(1e5, 6e9, peak_bf16_tflops(name)) is None

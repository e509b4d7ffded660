"""FLOP counts and peak rates for MFU: pure arithmetic, no torch.

MFU (model FLOP utilisation) = achieved model FLOP/s ÷ the GPU's dense bf16 peak. The model FLOPs
are counted from the architecture, never measured, so recomputation or wasted work cannot raise it.
"""

from __future__ import annotations

from dataclasses import dataclass

# Dense (no sparsity) bf16 tensor-core peaks in TFLOP/s from NVIDIA's datasheets, keyed by a
# fragment of the NVML device name. Order matters: the first fragment found in the name wins, so
# the PCIe and NVL variants come before the plain "H100" of the SXM part.
PEAK_BF16_TFLOPS: tuple[tuple[str, float], ...] = (
    ("H100 PCIe", 756.0),
    ("H100 NVL", 835.0),
    ("GH200", 989.0),
    ("H200", 989.0),
    ("H100", 989.0),  # SXM: NVML calls it "NVIDIA H100 80GB HBM3"
    ("H800", 989.0),
    ("H20", 148.0),
    ("B200", 2250.0),
    ("A100", 312.0),
    ("A800", 312.0),
    ("L40S", 362.0),
    ("A10G", 70.0),
)


def peak_bf16_tflops(gpu_name: str | None) -> float | None:
    """The dense bf16 peak of ``gpu_name`` (an NVML/CUDA device name), or None when unknown.

    None is an answer, not a default: MFU against a guessed peak would be a wrong number, so the
    caller reports that MFU cannot be judged instead.
    """
    if not gpu_name:
        return None
    for fragment, tflops in PEAK_BF16_TFLOPS:
        if fragment.lower() in gpu_name.lower():
            return tflops
    return None


@dataclass(frozen=True)
class ModelShape:
    """What the FLOP count needs to know of a GPT-style decoder."""

    d_model: int
    n_layers: int
    seq_len: int
    vocab: int
    n_params: int  # every trainable parameter, embedding tables included


def gpt_param_count(d_model: int, n_layers: int, seq_len: int, vocab: int) -> int:
    """Parameters of the decoder in ``model.py``: per block a fused QKV (3d²), an output
    projection (d²), a 4× MLP (8d²) and two LayerNorm weights (2d), no biases; token and position
    embeddings; a final LayerNorm; an untied LM head (d·V)."""
    d = d_model
    per_block = 12 * d * d + 2 * d
    return n_layers * per_block + vocab * d + seq_len * d + d + d * vocab


def training_flops_per_token(shape: ModelShape) -> float:
    """Model FLOPs to train on one token (forward + backward), the PaLM appendix-B form:

        6·N + 12·L·d·S

    N is the parameter count (2 FLOPs per parameter in the forward multiply-add, 4 in the
    backward for the gradients of inputs and weights); 12·L·d·S is the attention score and value
    products, QKᵀ and A·V, over a context of S tokens in each of L layers (2·2·d·S forward, twice
    that backward), counted for the full S×S square even though causal attention needs half, as
    PaLM and most published MFU figures do.

    N counts every parameter, the embedding tables included, as the reference measurements in
    docs/training.md do; the embedding lookup does no multiply, so a count without the token and
    position tables (Megatron's formula) reads lower, by about 7 % for the default model.
    Activation recomputation is not counted: it is work the hardware did but the model did not
    need.
    """
    return 6.0 * shape.n_params + 12.0 * shape.n_layers * shape.d_model * shape.seq_len


def mfu_percent(tokens_per_s: float, flops_per_token: float, peak_tflops: float | None) -> float | None:
    """Achieved model FLOP/s as a percentage of ``peak_tflops``; None when the peak is unknown."""
    if peak_tflops is None or peak_tflops <= 0:
        return None
    return 100.0 * tokens_per_s * flops_per_token / (peak_tflops * 1e12)

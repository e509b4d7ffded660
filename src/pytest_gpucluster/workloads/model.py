"""A GPT-style decoder for throughput tests, and its synthetic data.

Built for speed on Hopper and for the same code path on a CPU: a fused QKV projection, causal
``scaled_dot_product_attention`` (flash kernels on GPUs), no biases, pre-LayerNorm blocks, an
untied LM head (tying would put one tensor in two FSDP units). torch is imported inside the
functions so that importing this module stays light on the login node.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ModelConfig:
    """The decoder's shape."""

    d_model: int
    n_layers: int
    n_heads: int
    seq_len: int
    vocab: int

    def __post_init__(self) -> None:
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model {self.d_model} is not a multiple of n_heads {self.n_heads}")


def build_model(cfg: ModelConfig, *, device: Any, seed: int) -> Any:
    """The decoder on ``device``, initialised from ``seed`` alone, so every rank builds the same
    weights without a broadcast (FSDP shards them in place)."""
    import torch
    from torch import nn
    from torch.nn import functional as F

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            d = cfg.d_model
            self.ln1 = nn.LayerNorm(d, bias=False)
            self.qkv = nn.Linear(d, 3 * d, bias=False)
            self.proj = nn.Linear(d, d, bias=False)
            self.ln2 = nn.LayerNorm(d, bias=False)
            self.up = nn.Linear(d, 4 * d, bias=False)
            self.down = nn.Linear(4 * d, d, bias=False)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            b, s, d = x.shape
            h = cfg.n_heads
            q, k, v = self.qkv(self.ln1(x)).view(b, s, 3, h, d // h).permute(2, 0, 3, 1, 4)
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.proj(a.transpose(1, 2).reshape(b, s, d))
            out: torch.Tensor = x + self.down(F.gelu(self.up(self.ln2(x)), approximate="tanh"))
            return out

    class Decoder(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.tok = nn.Embedding(cfg.vocab, cfg.d_model)
            self.pos = nn.Embedding(cfg.seq_len, cfg.d_model)
            self.blocks = nn.ModuleList(Block() for _ in range(cfg.n_layers))
            self.ln_f = nn.LayerNorm(cfg.d_model, bias=False)
            self.head = nn.Linear(cfg.d_model, cfg.vocab, bias=False)

        def forward(self, tokens: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
            positions = torch.arange(tokens.shape[1], device=tokens.device)
            x = self.tok(tokens) + self.pos(positions)
            for block in self.blocks:
                x = block(x)
            logits = self.head(self.ln_f(x))
            return F.cross_entropy(logits.view(-1, logits.shape[-1]).float(), targets.view(-1))

    # Drawn on the device itself: a CPU draw of a billion normals takes seconds. Ranks of one
    # device type get the same stream from the same seed, which is all DDP and FSDP need.
    generator = torch.Generator(device=device).manual_seed(seed)
    with torch.device("meta"):
        model = Decoder()
    model = model.to_empty(device=device)
    # GPT-2 initialisation, scaled residual projections; drawn in one place from one seed.
    for name, p in model.named_parameters():
        if name.endswith(("ln1.weight", "ln2.weight", "ln_f.weight")):
            nn.init.ones_(p)
            continue
        std = 0.02 / (2 * cfg.n_layers) ** 0.5 if name.endswith(("proj.weight", "down.weight")) else 0.02
        with torch.no_grad():
            p.normal_(0.0, std, generator=generator)
    return model


# Synthetic sequences use at most this many distinct tokens. A model starts out spreading its
# predictions over the whole vocabulary; learning that only these occur takes a few optimiser
# steps and drops the loss by a third or more even for the GPU-sized model, so "the loss falls"
# is a sharp check within a 25-step test.
DATA_TOKENS = 1024


def synthetic_batches(cfg: ModelConfig, *, micro_batch: int, pool: int, seed: int, device: Any) -> list[Any]:
    """``pool`` (tokens, targets) micro-batches drawn on ``device`` from ``seed``: no dataset and
    no download. Tokens come from the first ``DATA_TOKENS`` ids, and each sequence mostly follows
    a fixed random successor table (token t+1 = succ[t] nine times in ten), so there is structure
    to learn; cycling a small pool lets the loss fall within a few steps."""
    import torch

    used = min(cfg.vocab, DATA_TOKENS)
    g = torch.Generator(device=device).manual_seed(seed)
    g_table = torch.Generator(device=device).manual_seed(12345)  # one table for every rank
    succ = torch.randperm(used, generator=g_table, device=device)
    batches = []
    for _ in range(pool):
        seq = torch.empty(micro_batch, cfg.seq_len + 1, dtype=torch.long, device=device)
        seq[:, 0] = torch.randint(0, used, (micro_batch,), generator=g, device=device)
        noise = torch.randint(0, used, (micro_batch, cfg.seq_len), generator=g, device=device)
        keep = torch.rand(micro_batch, cfg.seq_len, generator=g, device=device) < 0.9
        for t in range(cfg.seq_len):
            seq[:, t + 1] = torch.where(keep[:, t], succ[seq[:, t]], noise[:, t])
        batches.append((seq[:, :-1].contiguous(), seq[:, 1:].contiguous()))
    return batches

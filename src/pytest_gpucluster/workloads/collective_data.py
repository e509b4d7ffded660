"""The collectives' data: a deterministic pattern each rank fills its input with, and the exact
result every output must hold, checked element by element (a wrong result fails whatever its
speed). Values stay small integers, so every sum is exact in float32. Runs on the nodes."""

from __future__ import annotations

from typing import Any

CHUNK = 2**26  # elements per step when filling or checking, bounds the temporaries
MOD = 7  # data pattern period: values stay small integers, sums stay exact in float32


def pattern(torch: Any, reducing: bool, rank: int, start: int, end: int, device: Any) -> Any:
    """Rank ``rank``'s value at global element positions start..end."""
    j = torch.arange(start, end, device=device, dtype=torch.int64) % MOD
    if reducing:  # summed over ranks: (r+1)(j%7+1) → n(n+1)/2 · (j%7+1)
        return ((j + 1) * (rank + 1)).to(torch.float32)
    return (j + (rank + 1) * 8).to(torch.float32)  # identifies the source rank and position


def expected(torch: Any, op: str, rank: int, n: int, c: int, start: int, end: int, device: Any) -> Any:
    """Exact result at output positions start..end of rank ``rank``."""
    if op == "all_reduce":
        return pattern(torch, True, 0, start, end, device) * (n * (n + 1) // 2)
    if op == "reduce_scatter":  # output i of rank r is input position r*c+i, summed
        return pattern(torch, True, 0, rank * c + start, rank * c + end, device) * (n * (n + 1) // 2)
    if op == "broadcast":
        return pattern(torch, False, 0, start, end, device)
    m = torch.arange(start, end, device=device, dtype=torch.int64)
    src, i = m // c, m % c
    if op == "all_gather":  # chunk s of the output is rank s's input
        return ((i % MOD) + (src + 1) * 8).to(torch.float32)
    # alltoall: chunk s of rank r's output is chunk r of rank s's input
    return (((rank * c + i) % MOD) + (src + 1) * 8).to(torch.float32)


def fill(torch: Any, t: Any, reducing: bool, rank: int, offset: int = 0) -> None:
    """Fill ``t`` with rank ``rank``'s pattern from element ``offset`` on, a chunk at a time."""
    for start in range(0, t.numel(), CHUNK):
        end = min(t.numel(), start + CHUNK)
        t[start:end].copy_(pattern(torch, reducing, rank, offset + start, offset + end, t.device))


def compare(torch: Any, op: str, out: Any, rank: int, n: int, c: int) -> tuple[int, float]:
    """How many elements of ``out`` differ from the exact result of ``op``, and the largest error."""
    wrong, max_err = 0, 0.0
    for start in range(0, out.numel(), CHUNK):
        end = min(out.numel(), start + CHUNK)
        diff = (out[start:end] - expected(torch, op, rank, n, c, start, end, out.device)).abs()
        diff = torch.nan_to_num(diff, nan=float("inf"))
        wrong += int((diff != 0).sum().item())
        max_err = max(max_err, float(diff.max().item()) if diff.numel() else 0.0)
    return wrong, max_err

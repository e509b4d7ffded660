"""Runs of consecutive whole numbers, the one rule behind every folded list of GPUs, links, ports
and nodes the suite prints (``gpu0–3``, ``gpu[0-3,5]``, ``node[1-2]``), and of Slurm hostlists
(``gpu-[03,11-12]``). Pure: it imports nothing of the package, so the login side, the checks and
the verdicts may all use it."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence


def runs(values: Iterable[int]) -> list[tuple[int, int]]:
    """The distinct ``values`` in order as (first, last) of each run of consecutive numbers:
    ``[5, 0, 1, 2, 3, 3]`` → ``[(0, 3), (5, 5)]``."""
    out: list[tuple[int, int]] = []
    for n in sorted(set(values)):
        if out and n == out[-1][1] + 1:
            out[-1] = (out[-1][0], n)
        else:
            out.append((n, n))
    return out


def spans(values: Iterable[int], dash: str = "–", width: int = 0, pair_as_two: bool = False) -> list[str]:
    """Each run of ``values`` as text: ``3`` alone, ``0–3`` for a run (``dash`` between), numbers
    zero-padded to ``width``; ``pair_as_two`` writes a run of exactly two as ``4,5``."""
    out = []
    for first, last in runs(values):
        a, b = str(first).zfill(width), str(last).zfill(width)
        if first == last:
            out.append(a)
        elif pair_as_two and last == first + 1:
            out.append(f"{a},{b}")
        else:
            out.append(f"{a}{dash}{b}")
    return out


def hostlist(names: Sequence[str]) -> str:
    """Node names as Slurm folds them (``scontrol show hostlistsorted``): ``worker-9, worker-10,
    worker-11`` → ``worker-[9-11]``, ``gpu-03, gpu-11, gpu-12`` → ``gpu-[03,11-12]``. Names sort
    by their prefix, then by the width their number is written in, then by number; a number with
    a leading zero keeps its width, one without joins its neighbours whatever its digit count.
    Duplicates count once."""
    by_prefix: dict[str, list[tuple[int, int]]] = {}
    plain: list[str] = []
    for name in dict.fromkeys(names):
        match = re.fullmatch(r"(.*?)(\d+)", name)
        if match is None:
            plain.append(name)
            continue
        prefix, digits = match.groups()
        by_prefix.setdefault(prefix, []).append((len(digits), int(digits)))
    pieces = [(name, name) for name in plain]
    for prefix, numbers in by_prefix.items():
        folded = _fold(sorted(numbers))
        text = folded[0] if len(numbers) == 1 else f"[{','.join(folded)}]"
        pieces.append((prefix, f"{prefix}{text}"))
    return ",".join(text for _, text in sorted(pieces))


def _fold(numbers: Sequence[tuple[int, int]]) -> list[str]:
    """(width, number) pairs in Slurm's order as its ranges: consecutive numbers whose widths
    Slurm takes as one (``_width_equiv`` of its hostlist.c) join, written in the range's width."""
    folded: list[tuple[int, int, int]] = []  # (first, last, width)
    for width, number in numbers:
        if folded:
            first, last, common = folded[-1]
            joined = _common_width(first, common, number, width)
            if number == last + 1 and joined is not None:
                folded[-1] = (first, number, joined)
                continue
        folded.append((number, number, width))
    return [str(a).zfill(w) if a == b else f"{str(a).zfill(w)}-{str(b).zfill(w)}" for a, b, w in folded]


def _common_width(n: int, n_width: int, m: int, m_width: int) -> int | None:
    """The width two numbers share in one Slurm range, or None: the same width, or one of them
    reads the same zero-padded to either width (it has no leading zero at both)."""
    if n_width == m_width:
        return n_width
    if _zeros(n, n_width) != _zeros(n, m_width) and _zeros(m, m_width) != _zeros(m, n_width):
        return None
    return n_width if _zeros(n, n_width) != _zeros(n, m_width) else m_width


def _zeros(number: int, width: int) -> int:
    """How many leading zeros ``number`` takes when written ``width`` digits wide."""
    return max(0, width - len(str(number)))

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
    """Node names as a Slurm hostlist: ``gpu-03, gpu-11, gpu-12`` → ``gpu-[03,11-12]``."""
    groups: dict[tuple[str, int], list[int]] = {}
    plain: list[str] = []
    for name in names:
        match = re.fullmatch(r"(.*?)(\d+)", name)
        if match is None:
            plain.append(name)
            continue
        prefix, digits = match.group(1), match.group(2)
        groups.setdefault((prefix, len(digits)), []).append(int(digits))  # same width: one range
    out = list(plain)
    for (prefix, width), numbers in groups.items():
        numbers = sorted(set(numbers))
        text = spans(numbers, dash="-", width=width)
        out.append(f"{prefix}{text[0]}" if len(numbers) == 1 else f"{prefix}[{','.join(text)}]")
    return ",".join(out)

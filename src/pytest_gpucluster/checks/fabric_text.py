"""Folding the places a fabric finding covers into a few words: ``gpu0–3``, ``gpu2 links 3, 5``,
``mlx5_0–3 port 1``; and the spans and rates the sentences show."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from pytest_gpucluster.verdict.ranges import spans

_NUMBERED = re.compile(r"(.*?)(\d+)")


@dataclass(frozen=True, order=True)
class Place:
    """A port (``unit`` ``mlx5_2 port 1``, no link), an NVLink (``gpu0``, link 3), a GPU
    (``gpu0``, no link) or the node (empty ``unit``)."""

    unit: str
    link: int | None = None


def numbers(values: Iterable[int]) -> str:
    """``0, 1, 2, 3, 5`` → ``0–3, 5``."""
    return ", ".join(spans(values))


def labels(names: Sequence[str]) -> str:
    """``gpu0, gpu1, gpu2, gpu3`` → ``gpu0–3``; ``mlx5_0, mlx5_2`` → ``mlx5_0, 2``."""
    groups: dict[str, list[int]] = {}
    plain: list[str] = []
    for name in names:
        match = _NUMBERED.fullmatch(name)
        if match is None:
            plain.append(name)
        else:
            groups.setdefault(match.group(1), []).append(int(match.group(2)))
    return ", ".join([*dict.fromkeys(plain), *(f"{prefix}{numbers(ns)}" for prefix, ns in groups.items())])


def unit_order(unit: str) -> tuple[str, int, str]:
    """Sort key putting ``gpu2`` before ``gpu10`` and ``mlx5_2`` before ``mlx5_10``."""
    head, _, tail = unit.partition(" ")
    match = _NUMBERED.fullmatch(head)
    return (match.group(1), int(match.group(2)), tail) if match else (head, -1, tail)


def places(found: Iterable[Place], links_of: Mapping[str, int] | None = None) -> str:
    """The places folded: units with the same links (or ports with the same port number) share
    one phrase, ``gpu0–3`` where every link of those GPUs is among them (``links_of``: unit →
    number of links read), else ``gpu2 link 5``; phrases joined with ``and``."""
    links: dict[str, set[int]] = {}
    for place in found:
        links.setdefault(place.unit, set())
        if place.link is not None:
            links[place.unit].add(place.link)
    tails: dict[str, list[str]] = {}
    for unit in sorted(links, key=unit_order):
        head, _, port = unit.partition(" ")
        tail = f" {port}" if port else ""
        own = links[unit]
        if own and len(own) < (links_of or {}).get(unit, len(own) + 1):
            tail += f" link {next(iter(own))}" if len(own) == 1 else f" links {numbers(own)}"
        tails.setdefault(tail, []).append(head)
    return " and ".join(f"{labels(heads)}{tail}" for tail, heads in tails.items())


def span(seconds: float) -> str:
    """``321`` → ``5 min 21 s``."""
    total = round(max(0.0, seconds))
    if total < 60:
        return f"{total} s"
    minutes, secs = divmod(total, 60)
    if minutes < 60:
        return f"{minutes} min {secs} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes} min"


def rate(value: float) -> str:
    """Three significant digits: ``24.1``, ``1.3``, ``0.0031``, ``120``, ``1234``, ``5.6e-05``."""
    text = f"{value:.3g}"
    if "e" not in text:
        return text
    return f"{value:.0f}" if value >= 1 else f"{value:.1e}"


def rates(values: Iterable[float], per: str) -> str:
    """``24.1/s``, or ``21.3–24.1/s`` when they differ as shown."""
    shown = sorted({rate(v) for v in values}, key=float)
    return f"{shown[0]}/{per}" if len(shown) == 1 else f"{shown[0]}–{shown[-1]}/{per}"

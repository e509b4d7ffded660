"""A profile's ``constraint`` (sbatch ``--constraint``) read as Slurm reads it, to pick the nodes
that satisfy it before any job: node features joined by ``&`` (and) and ``|`` (or), grouped by
parentheses or by the brackets of Slurm's matching OR (``[a|b]``: every node with the same one; a
node alone satisfies it when it has any). Counts (``a*2``) and negation (``!a``) say nothing about
one node alone, so a profile's constraint may not use them. Pure: no Slurm is asked here."""

from __future__ import annotations

import re
from collections.abc import Collection

_TOKEN = re.compile(r"\s*(?:([A-Za-z0-9_.:\-]+)|([&|()\[\]])|(\S))")
_CLOSING = {"(": ")", "[": "]"}


def _tokens(expression: str) -> list[str]:
    """The names and operators of ``expression``; ValueError for a character no feature name or
    supported operator has."""
    out: list[str] = []
    for match in _TOKEN.finditer(expression):
        name, op, other = match.groups()
        if other is not None:
            why = {"*": "a count", "!": "a negation", ",": "a comma"}.get(other, f"{other!r}")
            raise ValueError(
                f"{why} cannot be judged node by node; write feature names joined by '&' and '|', with parentheses"
            )
        out.append(name or op)
    return out


def parse(expression: str) -> object:
    """``expression`` as a tree of names and ``("&"|"|", left, right)`` tuples; ValueError saying
    what is wrong with it."""
    tokens = _tokens(expression)
    if not tokens:
        raise ValueError("names no feature")
    tree, rest = _or(tokens)
    if rest:
        raise ValueError(f"{rest[0]!r} is out of place")
    return tree


def _or(tokens: list[str]) -> tuple[object, list[str]]:
    left, rest = _and(tokens)
    while rest and rest[0] == "|":
        right, rest = _and(rest[1:])
        left = ("|", left, right)
    return left, rest


def _and(tokens: list[str]) -> tuple[object, list[str]]:
    left, rest = _one(tokens)
    while rest and rest[0] == "&":
        right, rest = _one(rest[1:])
        left = ("&", left, right)
    return left, rest


def _one(tokens: list[str]) -> tuple[object, list[str]]:
    if not tokens:
        raise ValueError("ends where a feature name should follow")
    first, rest = tokens[0], tokens[1:]
    if first in _CLOSING:
        inner, rest = _or(rest)
        if not rest or rest[0] != _CLOSING[first]:
            raise ValueError(f"{first!r} is never closed")
        return inner, rest[1:]
    if first in {"&", "|", ")", "]"}:
        raise ValueError(f"{first!r} where a feature name should be")
    return first, rest


def satisfies(expression: str, features: Collection[str]) -> bool:
    """Whether a node with ``features`` satisfies ``expression`` on its own."""
    return _holds(parse(expression), set(features))


def _holds(tree: object, features: set[str]) -> bool:
    if isinstance(tree, str):
        return tree in features
    assert isinstance(tree, tuple)
    op, left, right = tree
    if op == "&":
        return _holds(left, features) and _holds(right, features)
    return _holds(left, features) or _holds(right, features)

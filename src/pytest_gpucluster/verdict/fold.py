"""Repeated sentences folded into one line with a count: a failed check's message, the terminal
summary, the report and the results' reasons all list failures through ``fold``. Pure: strings
in, strings out.

Two sentences fold together when they are the same once the index of a GPU, link, port, HCA or
rank and every free-standing number are set aside, e.g.

    node1:gpu0 link 3: nvlink_crc_flit_errors rose 0 → 12 (+12, at most +0 allowed) over 95 s
    node1:gpu2 link 17: nvlink_crc_flit_errors rose 0 → 40 (+40, at most +0 allowed) over 95 s

fold into ``node1:gpu0,2 link 3,17: nvlink_crc_flit_errors rose 0 → 12–40 (+12–40, at most +0
allowed) over 95 s`` with a count of 2: indices become the set they took (``gpu0–3``), numbers
that differ the range they spanned, numbers that agree stay. Identical sentences fold to
themselves with their count. A node name is never an index: the first word before a ``:``
(``gpu017:gpu3: ...``) and every name in ``fixed`` are kept as they are, so each node keeps a line
of its own. Nothing here knows which check wrote a sentence.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from pytest_gpucluster.verdict.ranges import spans

# An index: the word it belongs to, then the number. ``gpu3``, ``GPU 3``, ``link 17``, ``port 1``,
# ``mlx5_3``, ``rank 5``, ``nvswitch2``; never the digits of a longer word (``node13``, ``gpu-017``).
_INDEX = r"(?<![\w\-])(gpu|GPU |links? |ports? |ranks? |nvswitch|[a-z]+\d+_)(\d+)(?!\w)"
# A free-standing number: ``12``, ``+40``, ``0.987``, ``1e-05``; not inside a word, a version
# (``2.28.9``) or a host name (``gpu-017``).
_NUMBER = r"(?<![\w.\-+])([+-]?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?)(?!\w|\.\d)"
_TOKEN = re.compile(f"{_INDEX}|{_NUMBER}")
_LEADING_NAME = re.compile(r"^[\w.\-]+(?=:)")
_MASK = "\x00"


@dataclass(frozen=True)
class Folded:
    """One line standing for ``count`` sentences (``members``, in their first order, repeats
    kept once)."""

    text: str
    count: int
    members: tuple[str, ...]

    @property
    def line(self) -> str:
        """The text, with ``(×N)`` after it when it stands for more than one sentence."""
        return self.text if self.count == 1 else f"{self.text} (×{self.count})"


def _names_pattern(fixed: Sequence[str]) -> re.Pattern[str] | None:
    """One pattern for every fixed name as a whole word, the longest first."""
    names = sorted({n for n in fixed if n}, key=len, reverse=True)
    if not names:
        return None
    return re.compile(rf"(?<![\w.\-])(?:{'|'.join(map(re.escape, names))})(?![\w\-]|\.\w)")


def _mask(sentence: str, fixed: re.Pattern[str] | None) -> tuple[str, list[str]]:
    """The sentence with its leading name and every fixed name replaced by a placeholder that no
    token pattern reads (a character of Unicode's private use area between two NULs), and the
    names in placeholder order."""
    names: list[str] = []

    def hide(name: str) -> str:
        names.append(name)
        return f"{_MASK}{chr(0xE000 + len(names) - 1)}{_MASK}"

    masked = sentence
    lead = _LEADING_NAME.match(sentence)
    if lead:
        masked = hide(lead.group(0)) + masked[lead.end() :]
    if fixed is not None:
        masked = fixed.sub(lambda m: hide(m.group(0)), masked)
    return masked, names


def _unmask(text: str, names: Sequence[str]) -> str:
    return re.sub(f"{_MASK}(.){_MASK}", lambda m: names[ord(m.group(1)) - 0xE000], text, flags=re.DOTALL)


@dataclass(frozen=True)
class _Parsed:
    key: tuple[str, ...]  # the text between tokens, and each token's kind
    values: tuple[str, ...]  # each token's value, in order
    names: tuple[str, ...]


def _parse(sentence: str, fixed: re.Pattern[str] | None) -> _Parsed:
    masked, names = _mask(sentence, fixed)
    key: list[str] = []
    values: list[str] = []
    pos = 0
    for m in _TOKEN.finditer(masked):
        if m.group(1) is not None:
            key += [masked[pos : m.start()], "I" + m.group(1)]
            values.append(m.group(2))
        else:
            key += [masked[pos : m.start()], "N"]
            values.append(m.group(3))
        pos = m.end()
    key.append(masked[pos:])
    return _Parsed(tuple(key), tuple(values), tuple(names))


def index_set(indices: Iterable[int]) -> str:
    """``[0, 1, 2, 3, 6]`` → ``0–3,6``; two in a row stay two: ``[4, 5]`` → ``4,5``."""
    return ",".join(spans(indices, pair_as_two=True))


def _span(values: Sequence[str]) -> str:
    distinct = list(dict.fromkeys(values))
    if len(distinct) == 1:
        return distinct[0]
    low = min(distinct, key=float)
    high = max(distinct, key=float)
    return f"{low}–{high.lstrip('+')}" if not high.startswith("-") else f"{low} to {high}"


def fold(sentences: Iterable[str], fixed: Sequence[str] = ()) -> list[Folded]:
    """The sentences folded as this module's docstring says, in the order each line first
    appears; ``fixed``: names (nodes) that are never read as indices or numbers."""
    groups: dict[tuple[str, ...], list[tuple[str, _Parsed]]] = {}
    names = _names_pattern(fixed)
    for sentence in sentences:
        parsed = _parse(sentence, names)
        groups.setdefault((*parsed.key, _MASK, *parsed.names), []).append((sentence, parsed))
    out: list[Folded] = []
    for members in groups.values():
        first = members[0][1]
        if len(members) == 1 or all(s == members[0][0] for s, _ in members):
            out.append(Folded(members[0][0], len(members), (members[0][0],)))
            continue
        parts: list[str] = []
        for i, kind in enumerate(first.key[1::2]):
            parts.append(first.key[2 * i])
            taken = [p.values[i] for _, p in members]
            if kind.startswith("I"):
                parts.append(kind[1:] + index_set(int(v) for v in taken))
            else:
                parts.append(_span(taken))
        parts.append(first.key[-1])
        text = _unmask("".join(parts), first.names)
        out.append(Folded(text, len(members), tuple(dict.fromkeys(s for s, _ in members))))
    return out


def fold_lines(sentences: Iterable[str], fixed: Sequence[str] = ()) -> list[str]:
    """``fold`` as plain lines: each folded text with its ``(×N)``."""
    return [f.line for f in fold(sentences, fixed)]

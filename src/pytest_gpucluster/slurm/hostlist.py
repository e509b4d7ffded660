"""Slurm hostlists read without asking Slurm: ``node[01-03,7],gpu-a`` → node names, bounded."""

from __future__ import annotations

import re

# A hostlist naming more nodes than this is a typo (node[1-100000]), not a cluster.
MAX_HOSTLIST = 65536


_HOST_NAME = re.compile(r"^[A-Za-z0-9_.\-]+$")


def parse_hostlist(text: str) -> tuple[str, ...]:
    """A Slurm hostlist read without Slurm: ``gpu-[01-03,07],login1`` → gpu-01, gpu-02, gpu-03,
    gpu-07, login1 (ranges keep their zero padding; several brackets in one name multiply, as in
    Slurm). ValueError says what cannot be read and why: an unclosed or stray bracket, a range
    that counts down, a character no host name has."""
    names: list[str] = []
    for part in _hostlist_parts(text.replace(" ", "")):
        if part:  # "a,,b" names a and b, as Slurm reads it
            names += _expand_hosts(part)
        if len(names) > MAX_HOSTLIST:
            raise ValueError(f"names more than {MAX_HOSTLIST} nodes")
    if not names:
        raise ValueError("no node named")
    return tuple(dict.fromkeys(names))


def _hostlist_parts(text: str) -> list[str]:
    """``text`` split at the commas outside brackets; ValueError for unbalanced brackets."""
    parts: list[str] = []
    start, opened = 0, -1
    for i, ch in enumerate(text):
        if ch == "[":
            if opened >= 0:
                raise ValueError(f"'[' at character {i + 1} opens inside another '[': {text!r}")
            opened = i
        elif ch == "]":
            if opened < 0:
                raise ValueError(f"']' at character {i + 1} closes no '[': {text!r}")
            opened = -1
        elif ch == "," and opened < 0:
            parts.append(text[start:i])
            start = i + 1
    if opened >= 0:
        raise ValueError(f"'[' at character {opened + 1} is never closed: {text!r}")
    parts.append(text[start:])
    return parts


def _expand_hosts(part: str) -> list[str]:
    """One comma-free piece of a hostlist, every bracket expanded."""
    match = re.fullmatch(r"([^\[]*)\[([^\]]*)\](.*)", part)
    if match is None:
        if not _HOST_NAME.match(part):
            raise ValueError(f"{part!r} is not a host name (letters, digits, '_', '.', '-')")
        return [part]
    head, ranges, rest = match.groups()
    if head and not _HOST_NAME.match(head):
        raise ValueError(f"{head!r} in {part!r} is not the start of a host name")
    if not ranges:
        raise ValueError(f"empty brackets in {part!r}")
    numbers: list[str] = []
    for item in ranges.split(","):
        lo, dash, hi = item.partition("-")
        if not lo.isdigit() or (dash and not hi.isdigit()):
            raise ValueError(f"{item!r} in {part!r} is not a number or a range such as 1-4")
        first, last = int(lo), int(hi or lo)
        if last < first:
            raise ValueError(f"{item!r} in {part!r} counts down; write {hi}-{lo}")
        if last - first >= MAX_HOSTLIST:
            raise ValueError(f"{item!r} in {part!r} names more than {MAX_HOSTLIST} nodes")
        numbers += [f"{i:0{len(lo)}d}" for i in range(first, last + 1)]
    tails = _expand_hosts(rest) if rest else [""]
    if len(numbers) * len(tails) > MAX_HOSTLIST:
        raise ValueError(f"{part!r} names more than {MAX_HOSTLIST} nodes")
    return [f"{head}{n}{t}" for n in numbers for t in tails]

"""The cluster's switch tree, read from Slurm's topology/tree or topology/block syntax.

Two texts say the same thing: ``topology.conf`` (``SwitchName=leaf1 Nodes=node[01-16]``,
``SwitchName=spine Switches=leaf[1-4]``) and the output of ``scontrol show topology``, which adds
``Level=`` and ``LinkSpeed=`` and lists on every upper switch the nodes beneath it. Both are read
into one frozen ``Topology``: its leaves (the switches nodes hang from) with their nodes, and every
switch's parent. A line that cannot be read raises ``TopologyError`` with its line number and key.

Under topology/block (Slurm 23.11 and later) the text names blocks of nodes instead:
``topology.conf`` has ``BlockName=b1 Nodes=node[01-16]`` and ``BlockSizes=16,32``; ``scontrol show
topology`` prints ``BlockName=b1 BlockIndex=0 Nodes=node[01-16] BlockSize=16`` for every block and
``AggregatedBlock=b[1-2] BlockIndex=0 Nodes=node[01-32] BlockSize=32`` for every aggregate of
blocks the larger block sizes make. A block is read as a leaf (its nodes are closest to each
other), an aggregated block as the switch above the blocks it holds.
"""

from __future__ import annotations

import difflib
import types
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

# Keys as Slurm writes them; Slurm reads them without regard to case, and so does this module.
KEYS = ("SwitchName", "Nodes", "Switches", "Level", "LinkSpeed")
BLOCK_KEYS = ("BlockName", "AggregatedBlock", "BlockIndex", "BlockSize", "BlockSizes")
_BY_LOWER = {k.lower(): k for k in (*KEYS, *BLOCK_KEYS)}


class TopologyError(ValueError):
    """A topology text that cannot be read: ``line`` (1-based, 0 for the text as a whole) and
    ``key`` say where, the message says what is wrong."""

    def __init__(self, message: str, *, line: int = 0, key: str = "") -> None:
        self.line = line
        self.key = key
        self.reason = message
        where = ", ".join(p for p in (f"line {line}" if line else "", key) if p)
        super().__init__(f"{where}: {message}" if where else message)


@dataclass(frozen=True)
class Switch:
    """One switch: a leaf has nodes and no child switches; an upper switch has child switches."""

    name: str
    level: int  # 0 for a leaf, one more than its highest child above that
    nodes: tuple[str, ...]  # a leaf's own nodes; every node beneath an upper switch
    children: tuple[str, ...]
    parent: str | None
    line: int  # where the file names it

    @property
    def is_leaf(self) -> bool:
        return not self.children


@dataclass(frozen=True)
class Topology:
    """The switch tree: switches by name in the order the text names them."""

    switches: Mapping[str, Switch]
    plugin: str = "tree"  # Slurm's topology plugin the text is written for: "tree" or "block"

    @property
    def leaves(self) -> tuple[Switch, ...]:
        return tuple(s for s in self.switches.values() if s.is_leaf)

    @property
    def levels(self) -> int:
        """How many levels of switches the tree has (2: leaves and a spine)."""
        return 1 + max(s.level for s in self.switches.values())

    def leaf_of(self) -> dict[str, str]:
        """Every node → the name of its leaf."""
        return {node: leaf.name for leaf in self.leaves for node in leaf.nodes}

    def ancestors(self, name: str) -> tuple[str, ...]:
        """The switches above ``name``, nearest first."""
        out: list[str] = []
        parent = self.switches[name].parent
        while parent is not None:
            out.append(parent)
            parent = self.switches[parent].parent
        return tuple(out)


@dataclass(frozen=True)
class _Line:
    number: int
    values: dict[str, str]


def parse_topology(text: str) -> Topology:
    """``topology.conf`` or ``scontrol show topology`` text → ``Topology``. ``#`` starts a
    comment; a line ending in ``\\`` continues on the next, as in Slurm's files."""
    lines = [_read_line(number, line) for number, line in _logical_lines(text)]
    lines = [line for line in lines if line.values]
    if not lines:
        raise TopologyError("names no switch (expected lines such as SwitchName=leaf1 Nodes=node[01-16])")
    if any(k in line.values for line in lines for k in BLOCK_KEYS):
        return _parse_blocks(lines)
    declared: dict[str, _Line] = {}
    for line in lines:
        name = line.values.get("SwitchName")
        if name is None:
            raise TopologyError("a line must name its switch (SwitchName=...)", line=line.number, key="SwitchName")
        if name in declared:
            first = declared[name].number
            raise TopologyError(
                f"switch {name!r} is named again (first on line {first})", line=line.number, key="SwitchName"
            )
        declared[name] = line
    children = {name: _names(line, "Switches") for name, line in declared.items()}
    parent = _parents(declared, children)
    level = _levels(declared, children)
    own = {name: _names(line, "Nodes") for name, line in declared.items()}
    below = _nodes_below(declared, children, own, level)
    switches = {}
    for name, line in declared.items():
        _check_level(line, level[name])
        if not children[name] and not own[name]:
            raise TopologyError(f"switch {name!r} names neither Nodes nor Switches", line=line.number, key="Nodes")
        switches[name] = Switch(name, level[name], below[name], children[name], parent.get(name), line.number)
    return Topology(types.MappingProxyType(switches))


def read_topology(path: Path) -> Topology:
    """``parse_topology`` of a file; OSError and TopologyError pass through."""
    return parse_topology(path.read_text(encoding="utf-8"))


def _logical_lines(text: str) -> Iterable[tuple[int, str]]:
    """(number of the first physical line, the line without comment), continuations joined."""
    pending, start = "", 0
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].rstrip()
        if not pending:
            start = number
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        yield start, pending + line
        pending = ""
    if pending:
        yield start, pending


def _read_line(number: int, line: str) -> _Line:
    values: dict[str, str] = {}
    for word in line.split():
        key, eq, value = word.partition("=")
        known = _BY_LOWER.get(key.lower())
        if not eq:
            raise TopologyError(f"{word!r} is not KEY=VALUE", line=number, key=key)
        if known is None:
            guess = difflib.get_close_matches(key, (*KEYS, *BLOCK_KEYS), n=1)
            hint = f" Perhaps you meant '{guess[0]}'?" if guess else f" Known keys: {', '.join((*KEYS, *BLOCK_KEYS))}."
            raise TopologyError(f"unknown key.{hint}", line=number, key=key)
        if known in values:
            raise TopologyError("given twice on one line", line=number, key=known)
        if not value:
            raise TopologyError("has no value", line=number, key=known)
        values[known] = value
    return _Line(number, values)


def _names(line: _Line, key: str) -> tuple[str, ...]:
    value = line.values.get(key)
    if value is None:
        return ()
    # Imported here: the slurm package imports the verdicts, which import this package.
    from pytest_gpucluster.slurm.hostlist import parse_hostlist

    try:
        return parse_hostlist(value)
    except ValueError as exc:
        # scontrol cuts each line at SLURM_TOPO_LEN characters (512 unless set): a long list ends early.
        cut = "never closed" in str(exc)
        hint = " (saved from scontrol? set SLURM_TOPO_LEN=65536 so it does not cut long lines)" if cut else ""
        raise TopologyError(f"{value!r} is not a hostlist: {exc}{hint}", line=line.number, key=key) from None


def _parents(declared: Mapping[str, _Line], children: Mapping[str, tuple[str, ...]]) -> dict[str, str]:
    parent: dict[str, str] = {}
    for name, kids in children.items():
        line = declared[name].number
        for kid in kids:
            if kid not in declared:
                raise TopologyError(f"switch {name!r} names {kid!r}, which no line declares", line=line, key="Switches")
            if kid == name:
                raise TopologyError(f"switch {name!r} names itself", line=line, key="Switches")
            if kid in parent:
                raise TopologyError(
                    f"switch {kid!r} is already under {parent[kid]!r}; a tree gives each switch one parent",
                    line=line,
                    key="Switches",
                )
            parent[kid] = name
    return parent


def _levels(declared: Mapping[str, _Line], children: Mapping[str, tuple[str, ...]]) -> dict[str, int]:
    level: dict[str, int] = {}

    def height(name: str, chain: tuple[str, ...]) -> int:
        if name in level:
            return level[name]
        if name in chain:
            loop = " → ".join((*chain[chain.index(name) :], name))
            raise TopologyError(f"switches form a loop: {loop}", line=declared[name].number, key="Switches")
        kids = children[name]
        level[name] = 0 if not kids else 1 + max(height(k, (*chain, name)) for k in kids)
        return level[name]

    for name in declared:
        height(name, ())
    return level


def _nodes_below(
    declared: Mapping[str, _Line],
    children: Mapping[str, tuple[str, ...]],
    own: Mapping[str, tuple[str, ...]],
    level: Mapping[str, int],
) -> dict[str, tuple[str, ...]]:
    """Every switch's nodes: a leaf's own; an upper switch's, those of its children (where the
    text lists them too, as scontrol does, they must be the same nodes)."""
    leaf_of: dict[str, str] = {}
    below: dict[str, tuple[str, ...]] = {}
    for name in sorted(declared, key=lambda n: level[n]):
        line = declared[name].number
        if not children[name]:
            for node in own[name]:
                if node in leaf_of:
                    raise TopologyError(
                        f"node {node!r} is already under leaf {leaf_of[node]!r}", line=line, key="Nodes"
                    )
                leaf_of[node] = name
            below[name] = own[name]
            continue
        nodes = tuple(n for kid in children[name] for n in below[kid])
        if own[name] and set(own[name]) != set(nodes):
            extra = sorted(set(own[name]) - set(nodes))[:3]
            missing = sorted(set(nodes) - set(own[name]))[:3]
            detail = f"not under its switches: {', '.join(extra)}" if extra else f"leaves out {', '.join(missing)}"
            raise TopologyError(
                f"switch {name!r} has child switches, so its nodes are theirs; this list {detail}",
                line=line,
                key="Nodes",
            )
        below[name] = nodes
    return below


def _check_level(line: _Line, level: int) -> None:
    given = line.values.get("Level")
    if given is None:
        return
    if not given.isdigit():
        raise TopologyError(f"expected a whole number, got {given!r}", line=line.number, key="Level")
    if int(given) != level:
        raise TopologyError(
            f"says {given}, but the switches beneath it put it at level {level}", line=line.number, key="Level"
        )


def _parse_blocks(lines: list[_Line]) -> Topology:
    """topology/block: every block a leaf; every aggregated block the switch above the largest
    blocks and aggregates within it, which must hold its nodes exactly."""
    blocks: dict[str, tuple[_Line, tuple[str, ...]]] = {}
    aggregates: dict[str, tuple[_Line, tuple[str, ...]]] = {}
    for line in lines:
        tree_keys = [k for k in ("SwitchName", "Switches", "Level", "LinkSpeed") if k in line.values]
        if tree_keys:
            raise TopologyError(
                "topology/tree and topology/block lines in one text; a cluster has one topology plugin",
                line=line.number,
                key=tree_keys[0],
            )
        for key in ("BlockIndex", "BlockSize"):
            if key in line.values and not line.values[key].isdigit():
                raise TopologyError(f"expected a whole number, got {line.values[key]!r}", line=line.number, key=key)
        if "BlockSizes" in line.values:
            sizes = line.values["BlockSizes"].split(",")
            if not all(size.isdigit() for size in sizes) or len(line.values) > 1:
                raise TopologyError(
                    "expected a line of its own with whole numbers, as in BlockSizes=16,32",
                    line=line.number,
                    key="BlockSizes",
                )
            continue
        named = [k for k in ("BlockName", "AggregatedBlock") if k in line.values]
        if len(named) != 1:
            raise TopologyError(
                "a line must name one block (BlockName=... or AggregatedBlock=...)",
                line=line.number,
                key=named[-1] if named else "BlockName",
            )
        key = named[0]
        name = line.values[key]
        if name in blocks or name in aggregates:
            first = (blocks.get(name) or aggregates[name])[0].number
            raise TopologyError(f"block {name!r} is named again (first on line {first})", line=line.number, key=key)
        nodes = _names(line, "Nodes")
        if not nodes:
            raise TopologyError(f"block {name!r} names no Nodes", line=line.number, key="Nodes")
        (blocks if key == "BlockName" else aggregates)[name] = (line, nodes)
    if not blocks:
        raise TopologyError("names no block (expected lines such as BlockName=b1 Nodes=node[01-16])")
    block_of: dict[str, str] = {}
    for name, (line, nodes) in blocks.items():
        for node in nodes:
            if node in block_of:
                raise TopologyError(
                    f"node {node!r} is already in block {block_of[node]!r}", line=line.number, key="Nodes"
                )
            block_of[node] = name
    # Smallest aggregates first: each takes as children the blocks and aggregates within it that
    # no smaller aggregate has taken yet.
    level = dict.fromkeys(blocks, 0)
    below = {name: nodes for name, (_, nodes) in blocks.items()}
    parent: dict[str, str] = {}
    children: dict[str, tuple[str, ...]] = {}
    for name, (line, nodes) in sorted(aggregates.items(), key=lambda item: len(item[1][1])):
        held = set(nodes)
        kids = tuple(k for k in below if k not in parent and k != name and set(below[k]) <= held)
        covered = {n for k in kids for n in below[k]}
        if covered != held:
            loose = sorted(held - covered)[:3]
            raise TopologyError(
                f"aggregated block {name!r} holds nodes of no block within it: {', '.join(loose)}",
                line=line.number,
                key="Nodes",
            )
        for kid in kids:
            parent[kid] = name
        children[name] = kids
        level[name] = 1 + max(level[k] for k in kids)
        below[name] = tuple(n for k in kids for n in below[k])
    switches = {
        name: Switch(name, 0, nodes, (), parent.get(name), line.number) for name, (line, nodes) in blocks.items()
    }
    for name, (line, _) in aggregates.items():
        switches[name] = Switch(name, level[name], below[name], children[name], parent.get(name), line.number)
    return Topology(types.MappingProxyType(switches), plugin="block")

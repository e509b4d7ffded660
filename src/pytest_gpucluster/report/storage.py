"""Results document → the storage section a customer reads at a glance: per node the write and
read-back throughput of its streams (one per GPU, drawn as bars) and their spread, the aggregate,
how soon a file one node writes (or renames into place) is seen on another, the large directory,
the cold import of the framework with the slowest node, and the checkpoint from every GPU (save
and restore seconds and GB/s, the slowest rank, bit for bit or not); and the handover sheet's
storage line. Pure: the ``storage`` details the storage tests recorded (``checks.storage.section``,
``checks.storage_checkpoint.section``) in, frozen dataclasses of formatted strings out; no HTML.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from pytest_gpucluster.report.plots import natural


@dataclass(frozen=True)
class NodeRow:
    """One node's streams and what else it measured."""

    node: str
    streams: str  # "8 × fio, O_DIRECT"
    write: str  # "8123 MB/s"
    read: str
    per_stream: str  # "write 980–1040, read 1100–1210 MB/s"
    metadata: str
    round_trips: str  # "median 2.1 ms, max 4.0 ms to node2"
    note: str = ""  # why the streams were not measured
    cold_import: str = "–"  # "2.41 s"


class Bar(NamedTuple):
    """One node's bars: its streams' write and read together (MB/s), None where not measured."""

    node: str
    write: float | None
    read: float | None


@dataclass(frozen=True)
class CheckpointRow:
    """One rank's shard: saved and restored GB/s."""

    place: str
    save: str
    restore: str
    slowest: bool
    mismatches: int


@dataclass(frozen=True)
class Checkpoint:
    """The checkpoint from every GPU."""

    summary: str
    save: str  # "12.4 GB in 3.1 s: 4.0 GB/s, slowest rank node2:gpu5 (2.9 s)"
    restore: str
    bit_for_bit: str
    rows: tuple[CheckpointRow, ...]


@dataclass(frozen=True)
class Storage:
    """The storage section."""

    summary: str  # the aggregate and the mount
    rows: tuple[NodeRow, ...]
    visibility: str
    large_dir: str
    checkpoint: Checkpoint | None
    bars: tuple[Bar, ...] = ()  # each node's write and read, for the bar chart
    renamed: str = ""  # the renamed files' round trips: their distribution
    cold_import: str = ""  # every node's cold import at once: the median and the slowest node


def _sections(doc: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    for t in doc.get("tests", []):
        section = t.get("storage")
        if isinstance(section, Mapping) and isinstance(section.get(key), Mapping) and section[key]:
            return section[key]  # type: ignore[no-any-return]
    return {}


def _num(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and value == value else None


def _rate(value: Any, unit: str = "MB/s") -> str:
    v = _num(value)
    return f"{v:.4g} {unit}" if v is not None else "–"


def _span(values: Sequence[Any]) -> str:
    got = [v for v in (_num(x) for x in values) if v is not None]
    if not got:
        return "–"
    return f"{min(got):.4g}" if min(got) == max(got) else f"{min(got):.4g}–{max(got):.4g}"


def _trips(trips: Sequence[Any], peer: str) -> str:
    got = [v for v in (_num(x) for x in trips) if v is not None]
    if not got:
        return "–"
    return f"median {statistics.median(got):.3g} ms, max {max(got):.3g} ms to {peer or '?'}"


def view(doc: Mapping[str, Any]) -> Storage | None:
    """The storage section, where the storage tests ran; None where they did not."""
    nodes = _sections(doc, "nodes")
    checkpoint = checkpoint_view(_sections(doc, "checkpoint"))
    if not nodes and checkpoint is None:
        return None
    rows, bars = [], []
    writes, reads, trips, renamed = [], [], [], []
    imports: dict[str, float] = {}
    lister = writer = None
    for name in sorted(nodes, key=natural):
        n = nodes[name]
        count = int(n.get("streams") or 0)
        if (w := _num(n.get("write_mb_s"))) is not None:
            writes.append(w)
        if (r := _num(n.get("read_mb_s"))) is not None:
            reads.append(r)
        if w is not None or r is not None:
            bars.append(Bar(name, w, r))
        if (seconds := _num(n.get("import_s"))) is not None:
            imports[name] = seconds
        trips += [t for t in (_num(x) for x in n.get("round_trips_ms") or []) if t is not None]
        renamed += [t for t in (_num(x) for x in n.get("renamed_round_trips_ms") or []) if t is not None]
        if "large_dir_files" in n:
            writer = (name, n)
        if "large_dir_listed" in n:
            lister = (name, n)
        rows.append(
            NodeRow(
                node=name,
                streams=f"{count} × {n.get('tool', '?')}, {n.get('mode') or '–'}" if count else "–",
                write=_rate(n.get("write_mb_s")),
                read=_rate(n.get("read_mb_s")),
                per_stream=f"write {_span(n.get('write_mb_s_per_stream') or [])}, "
                f"read {_span(n.get('read_mb_s_per_stream') or [])} MB/s"
                if count
                else "–",
                metadata=_rate(n.get("metadata_ops_s"), "ops/s"),
                round_trips=_trips(n.get("round_trips_ms") or [], str(n.get("peer") or "")),
                note=str(n.get("not_measured") or ""),
                cold_import=f"{seconds:.3g} s" if seconds is not None else "–",
            )
        )
    mounts = sorted({str(n.get("mount")) for n in nodes.values() if n.get("mount")})
    summary = (
        f"{len(nodes)} node(s) at once: write {sum(writes) / 1e3:.3g} GB/s, read {sum(reads) / 1e3:.3g} GB/s "
        f"in aggregate ({len(writes)} node(s) measured)"
        if writes
        else f"{len(nodes)} node(s): no stream measured"
    )
    if mounts:
        summary += f" on {'; '.join(mounts)}"
    visibility = _distribution(trips, "round trips between neighbour nodes")
    short = sum(int(_num(n.get("renamed_short")) or 0) for n in nodes.values())
    missed = sum(int(_num(n.get("renamed_missed")) or 0) for n in nodes.values())
    seen = _distribution(renamed, "round trips of files renamed into place, each read whole")
    if seen and (short or missed):
        seen += f"; {short} seen short, {missed} never answered"
    module = next((str(n["import_module"]) for n in nodes.values() if n.get("import_module")), "the framework")
    large = ""
    if writer and lister:
        large = (
            f"{writer[1]['large_dir_files']} files made by {writer[0]} in {writer[1]['large_dir_create_s']:.3g} s; "
            f"{lister[0]} listed {lister[1]['large_dir_listed']} in {lister[1]['large_dir_list_s']:.3g} s"
        )
    return Storage(
        summary, tuple(rows), visibility, large, checkpoint, tuple(bars), seen, _cold_import(imports, module)
    )


def chart_bars(bars: Sequence[Bar], limit: int) -> tuple[tuple[Bar, ...], str]:
    """The bars the chart draws and its title: every node's, or past ``limit`` nodes the
    ``limit`` slowest (by the lesser of their write and read; a node with neither last), in node
    order, the title saying how many of how many (the table holds every node)."""
    title = "each node's write and read, every node at once"
    if len(bars) <= limit:
        return tuple(bars), title
    worst = sorted(bars, key=lambda b: min((v for v in (b.write, b.read) if v is not None), default=math.inf))
    kept = {b.node for b in worst[:limit]}
    title = f"the {limit} slowest of {len(bars)} nodes' write and read, every node at once"
    return tuple(b for b in bars if b.node in kept), title


def _distribution(trips: Sequence[float], what: str) -> str:
    """``10 round trips ...: median 3 ms, 90th percentile 4 ms, max 4 ms``; "" where none."""
    if not trips:
        return ""
    return (
        f"{len(trips)} {what}: median {statistics.median(trips):.3g} ms, "
        f"90th percentile {_percentile(trips, 0.9):.3g} ms, max {max(trips):.3g} ms"
    )


def _cold_import(seconds: Mapping[str, float], module: str) -> str:
    """``import torch on 2 node(s) at once: median 2.1 s, slowest node2 3.4 s``; "" where none."""
    if not seconds:
        return ""
    slowest = max(seconds, key=lambda n: seconds[n])
    return (
        f"import {module} on {len(seconds)} node(s) at once: median {statistics.median(seconds.values()):.3g} s, "
        f"slowest {slowest} {seconds[slowest]:.3g} s"
    )


def _percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _way(section: Mapping[str, Any], way: str) -> str:
    w = section.get(way)
    if not isinstance(w, Mapping):
        return "not measured"
    gb = (_num(w.get("bytes")) or 0.0) / 1e9
    return (
        f"{gb:.3g} GB in {_num(w.get('s')) or 0:.3g} s: {_rate(w.get('gb_s'), 'GB/s')}; "
        f"slowest rank {w.get('slowest')} ({_num(w.get('slowest_s')) or 0:.3g} s of its own I/O)"
    )


def checkpoint_view(section: Mapping[str, Any]) -> Checkpoint | None:
    """The checkpoint part of the section, where it ran."""
    if not section:
        return None
    ranks: Mapping[str, Mapping[str, Any]] = section.get("ranks") or {}
    slow = {(section.get(w) or {}).get("slowest") for w in ("save", "restore")}
    rows = tuple(
        CheckpointRow(
            place,
            _rate(r.get("save_gb_s"), "GB/s"),
            _rate(r.get("restore_gb_s"), "GB/s"),
            place in slow,
            int(r.get("mismatches") or 0),
        )
        for place, r in sorted(ranks.items(), key=lambda kv: natural(kv[0]))
    )
    wrong = [r.place for r in rows if r.mismatches]
    if section.get("bit_for_bit"):
        bits = f"every one of {len(rows)} ranks restored bit for bit what it saved"
    elif wrong:
        bits = f"restored bits differ on {', '.join(wrong)}"
    else:
        bits = "not compared: " + next(
            (str(r.get("not_measured")) for r in ranks.values() if r.get("not_measured")), "?"
        )
    model = str(section.get("note") or "")
    summary = f"{len(rows)} rank(s), one per GPU, saved and restored their shards with torch.distributed.checkpoint"
    return Checkpoint(
        summary + (f" ({model})" if model else ""), _way(section, "save"), _way(section, "restore"), bits, rows
    )


def sheet_line(doc: Mapping[str, Any]) -> str:
    """The handover sheet's storage line: the aggregate write and read, and the checkpoint's
    save and restore rates with the slowest rank; "" where storage was not measured."""
    found = view(doc)
    if found is None:
        return ""
    parts = [found.summary]
    section = _sections(doc, "checkpoint")
    save = section.get("save") if isinstance(section.get("save"), Mapping) else None
    if save:
        restore = section.get("restore") or {}
        parts.append(
            f"checkpoint save {_rate(save.get('gb_s'), 'GB/s')}, restore {_rate(restore.get('gb_s'), 'GB/s')} "
            f"in aggregate (slowest rank {save.get('slowest')})"
        )
    if found.cold_import:
        parts.append(found.cold_import.replace("import ", "cold import ", 1))
    return "; ".join(parts)

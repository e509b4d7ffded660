"""A node's gres.conf read on the login node: the GPU device files it lists for the node, in the
order Slurm numbers them (GRES index i is the i-th file), so that a job's GRES indices can be told
from the device minors it holds. Pure: text in, device files out."""

from __future__ import annotations

import posixpath
import re

from pytest_gpucluster.slurm.hostlist import parse_hostlist

_MINOR = re.compile(r"(\d+)$")


def _fields(line: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for token in line.split():
        key, sep, value = token.partition("=")
        if sep:
            out[key.lower()] = value
    return out


def _expand_files(value: str) -> tuple[str, ...]:
    """``/dev/nvidia[0-3]`` or ``/dev/nvidia2,/dev/nvidia0`` → the files, in the order written."""
    files: list[str] = []
    for part in re.split(r",(?![^\[]*\])", value):
        head, base = posixpath.split(part)
        files += [posixpath.join(head, name) for name in parse_hostlist(base)]
    return tuple(files)


# AutoDetect values that leave the written order alone: no GPU list is detected to merge with.
_NO_AUTODETECT = ("off", "none", "")


def node_gpu_files(text: str, node: str) -> tuple[str, ...] | None:
    """The GPU device files gres.conf ``text`` lists for ``node``, in GRES index order; None when
    it lists none for the node by file (no line for it, or a line that cannot be read), or when
    ``AutoDetect`` is on for the node: slurmd then merges the written lines with the GPUs it
    detects and sorts them by device file and PCI order, by rules that differ between Slurm
    releases (gres_gpu.c, ``_merge_system_gres_conf``). The order is then Slurm's own and nothing
    is judged against it."""
    files: list[str] = []
    autodetect = {"all": "", "node": ""}
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        f = _fields(line)
        try:
            mine = "nodename" not in f or node in parse_hostlist(f["nodename"])
        except ValueError:
            return None
        if "autodetect" in f and mine:
            autodetect["node" if "nodename" in f else "all"] = f["autodetect"].lower()
        if f.get("name", "").lower() != "gpu" or "file" not in f or not mine:
            continue
        try:
            files += _expand_files(f["file"])
        except ValueError:
            return None
    if (autodetect["node"] or autodetect["all"]) not in _NO_AUTODETECT:
        return None
    return tuple(files) or None


def minor_of(path: str) -> int | None:
    """``/dev/nvidia3`` → 3; None for a file without a trailing number."""
    match = _MINOR.search(posixpath.basename(path))
    return int(match.group(1)) if match else None


def gres_order_mismatch(text: str | None, node: str, indices: tuple[str, ...], minors: list[int]) -> str | None:
    """Where the job's GRES ``indices`` on ``node`` name other device files in the node's gres.conf
    than the devices (``minors``) the job holds: the files gres.conf gives those indices, in words;
    None where they agree or gres.conf names no files for the node."""
    files = node_gpu_files(text, node) if text else None
    if files is None or not all(i.isdigit() for i in indices):
        return None
    named = [files[int(i)] for i in indices if int(i) < len(files)]
    expected = sorted(m for f in named if (m := minor_of(f)) is not None)
    if len(named) == len(indices) and expected == sorted(minors):
        return None
    return ", ".join(named) or "no device file"

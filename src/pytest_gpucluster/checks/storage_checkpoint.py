"""The checkpoint from every GPU (``workloads.storage_checkpoint``), judged on the login node.

* Restored bits that differ from the saved ones fail the rank's node, naming the rank, its GPU and
  the tensors; every rank of several nodes wrong alike is the shared filesystem's finding.
* Each GPU's own save and restore rate (its bytes over its own timed I/O) against
  ``storage.checkpoint_save_per_gpu`` and ``storage.checkpoint_restore_per_gpu``: every GPU past
  the line alike, on more than one node, is the shared filesystem's; otherwise the GPUs past it
  are their nodes'.
* The whole checkpoint over the collective's seconds against ``storage.checkpoint_*_aggregate``
  is the shared filesystem's alone.
* A line the site has not set is a warning asking for it, as for the other storage rates.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pytest_gpucluster.checks.storage import Judged, PerGpu, per_gpu, shared_fs_line
from pytest_gpucluster.config import ThresholdSet
from pytest_gpucluster.verdict import Finding, Measurement
from pytest_gpucluster.workloads.storage_checkpoint import CheckpointRank

WAYS = {"save": "saves", "restore": "restores"}


def gpu_index(label: str) -> int | None:
    """N of ``gpuN``; None for a CPU rank standing in (``cpuR``)."""
    return int(label[3:]) if label.startswith("gpu") and label[3:].isdigit() else None


def _rate(rank: CheckpointRank, way: str) -> float:
    return rank.write_gb_s if way == "save" else rank.read_gb_s


def _seconds(rank: CheckpointRank, way: str) -> float:
    return rank.write_s if way == "save" else rank.read_s


def _bytes(rank: CheckpointRank, way: str) -> int:
    return rank.bytes_written if way == "save" else rank.bytes_read


def slowest(ranks: Sequence[CheckpointRank], way: str) -> CheckpointRank | None:
    """The measured rank whose own I/O took longest."""
    measured = [r for r in ranks if r.measured]
    return max(measured, key=lambda r: _seconds(r, way)) if measured else None


def not_measured(ranks: Sequence[CheckpointRank], nodes: Sequence[str]) -> list[Finding]:
    """Nodes that sent no rank's result, and why no checkpoint was written (free space or free
    inodes: the filesystem's, not judged)."""
    found = [
        Finding.on_node(n, f"{n}: sent no result from the checkpoint job")
        for n in nodes
        if n not in {r.node for r in ranks}
    ]
    short = [r for r in ranks if r.short_of_space or r.short_of_inodes]
    if short:
        found.append(
            Finding.outside(
                "shared_fs",
                f"the checkpoint was not written: {short[0].not_measured}",
                nodes=sorted({r.node for r in short}),
                severity="not_judged",
            )
        )
    return found


def restored_bits(ranks: Sequence[CheckpointRank], nodes: Sequence[str]) -> list[Finding]:
    """Every rank restored exactly the bits it saved; a rank that did not fails its node."""
    found = not_measured(ranks, nodes)
    wrong = [r for r in ranks if r.mismatches]
    measured = [r for r in ranks if r.measured]

    def said(r: CheckpointRank) -> str:
        names = ", ".join(r.mismatched) + (", ..." if r.mismatches > len(r.mismatched) else "")
        return f"rank {r.rank} ({r.place}): {r.mismatches} of {r.tensors} tensors differ ({names})"

    if wrong and len(wrong) == len(measured) and len({r.node for r in wrong}) > 1:
        found.append(
            Finding.outside(
                "shared_fs",
                f"the shared filesystem ({wrong[0].path}): every rank restored other bits than it saved: "
                + "; ".join(said(r) for r in wrong),
                nodes=sorted({r.node for r in wrong}),
            )
        )
        return found
    found += [
        Finding.on_node(
            r.node,
            f"{said(r)}: restored from the checkpoint in {r.path}, not bit for bit what it saved",
            gpu=gpu_index(r.gpu),
        )
        for r in wrong
    ]
    return found


def rates(ranks: Sequence[CheckpointRank], thresholds: ThresholdSet, job_id: str) -> Judged:
    """Each GPU's save and restore rate and the whole checkpoint's, by the module's rule."""
    measured = [r for r in ranks if r.measured]
    judged = Judged()
    if not measured:
        return judged
    for way, what in WAYS.items():
        judged += _per_gpu(measured, way, what, thresholds, job_id)
        judged += _aggregate(measured, way, what, thresholds, job_id)
    return judged


def _per_gpu(ranks: Sequence[CheckpointRank], way: str, what: str, thresholds: ThresholdSet, job_id: str) -> Judged:
    values = [
        PerGpu(
            r.node,
            gpu_index(r.gpu),
            r.place,
            _rate(r, way),
            f"rank {r.rank}, {_bytes(r, way) / 1e6:.4g} MB in {_seconds(r, way):.3g} s",
        )
        for r in ranks
    ]
    return per_gpu(
        values,
        f"storage.checkpoint_{way}_per_gpu",
        "GB/s",
        thresholds,
        what=f"{what} its checkpoint shard",
        where=ranks[0].path,
        job_id=job_id,
    )


def _depth(rank: CheckpointRank) -> str:
    """``; 8 of the model's 16 blocks, what 10 % of free space holds`` where the model was cut."""
    if 0 < rank.layers < rank.layers_asked:
        return f"; {rank.layers} of the model's {rank.layers_asked} blocks, what the share of free space holds"
    return ""


def _aggregate(ranks: Sequence[CheckpointRank], way: str, what: str, thresholds: ThresholdSet, job_id: str) -> Judged:
    metric = f"storage.checkpoint_{way}_aggregate"
    seconds = max(r.save_s if way == "save" else r.restore_s for r in ranks)
    total = sum(_bytes(r, way) for r in ranks)
    nodes = sorted({r.node for r in ranks})
    m = Measurement.across(
        metric,
        total / 1e9 / seconds,
        "GB/s",
        nodes,
        detail=f"{total / 1e6:.4g} MB by {len(ranks)} rank(s) in {seconds:.3g} s{_depth(ranks[0])}",
        job_id=job_id,
    )
    return shared_fs_line(m, thresholds, nodes, f"the checkpoint {what}")


def section(ranks: Sequence[CheckpointRank], note: str = "") -> dict[str, Any]:
    """The checkpoint for the results (``storage`` on the checkpoint tests): each rank's bytes,
    seconds and rates, the whole's, and the slowest rank of each way."""
    measured = [r for r in ranks if r.measured]
    out: dict[str, Any] = {
        "note": note,
        "ranks": {
            r.place: {
                "rank": r.rank,
                "save_bytes": r.bytes_written,
                "save_s": round(r.write_s, 4),
                "save_gb_s": round(r.write_gb_s, 4) if r.measured else None,
                "restore_bytes": r.bytes_read,
                "restore_s": round(r.read_s, 4),
                "restore_gb_s": round(r.read_gb_s, 4) if r.measured else None,
                "mismatches": r.mismatches,
                "not_measured": r.not_measured,
            }
            for r in ranks
        },
    }
    if measured:
        for way in WAYS:
            seconds = max(r.save_s if way == "save" else r.restore_s for r in measured)
            total = sum(_bytes(r, way) for r in measured)
            late = slowest(measured, way)
            out[way] = {
                "bytes": total,
                "s": round(seconds, 4),
                "gb_s": round(total / 1e9 / seconds, 4) if seconds > 0 else None,
                "slowest": late.place if late else None,
                "slowest_s": round(_seconds(late, way), 4) if late else None,
            }
    out["bit_for_bit"] = bool(measured) and not any(r.mismatches for r in measured)
    return {"checkpoint": out}

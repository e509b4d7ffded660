"""nccl-tests arithmetic and the result types of a collective sweep: pure, no torch.

Everything here follows NVIDIA/nccl-tests 2.x so a number from this suite and one from
``all_reduce_perf`` mean the same thing:

* a *size* is the whole buffer: all_gather's output, reduce_scatter's input, alltoall's send
  buffer; per-rank element counts are rounded down to 16 bytes the way nccl-tests does;
* algbw = size / time with GB = 1e9 bytes; busbw = algbw × a factor per collective
  (all_reduce 2(n−1)/n; all_gather, reduce_scatter, alltoall (n−1)/n; broadcast 1);
* a result checked wrong voids its bandwidth, whatever it is.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from pytest_gpucluster.workloads.nccl_log import GpuNics

OPS: tuple[str, ...] = ("all_reduce", "all_gather", "reduce_scatter", "alltoall", "broadcast")
ELEMENT_BYTES = 4  # float32, nccl-tests' default type
# On gloo (CPU) the sweep proves the code path and the correctness checks, not a fabric: sizes are
# clamped to this so a CI machine with two cores finishes in seconds.
GLOO_MAX_BYTES = 4 * 2**20
_ALIGN_ELEMENTS = 16 // ELEMENT_BYTES  # nccl-tests: (count/nranks) & ~(16/eltSize - 1)


def bus_factor(op: str, n_ranks: int) -> float:
    """busbw / algbw for ``op`` over ``n_ranks`` (nccl-tests' getBw)."""
    if n_ranks < 1:
        raise ValueError(f"a collective needs at least one rank, got {n_ranks}")
    if op == "all_reduce":
        return 2 * (n_ranks - 1) / n_ranks
    if op in ("all_gather", "reduce_scatter", "alltoall"):
        return (n_ranks - 1) / n_ranks
    if op == "broadcast":
        return 1.0
    raise ValueError(f"unknown collective {op!r}; known: {', '.join(OPS)}")


def algbw_gbps(size_bytes: int, seconds: float) -> float:
    """Algorithm bandwidth in GB/s (1e9 bytes), as nccl-tests prints it."""
    return size_bytes / 1e9 / seconds if seconds > 0 else float("nan")


def busbw_gbps(op: str, n_ranks: int, size_bytes: int, seconds: float) -> float:
    """Bus bandwidth in GB/s: algbw × the collective's factor."""
    return algbw_gbps(size_bytes, seconds) * bus_factor(op, n_ranks)


@dataclass(frozen=True)
class Shape:
    """One size of one collective: the counts nccl-tests would use for it."""

    op: str
    n_ranks: int
    count: int  # nccl-tests' "count" column: elements per rank for gather/scatter/alltoall
    size_bytes: int  # nccl-tests' "size" column: the whole buffer

    @property
    def total_elements(self) -> int:
        """Elements of the whole buffer."""
        return self.size_bytes // ELEMENT_BYTES


def shape_for(op: str, n_ranks: int, size_bytes: int) -> Shape:
    """The buffer nccl-tests allocates when asked for ``size_bytes`` of ``op`` on ``n_ranks``."""
    bus_factor(op, n_ranks)  # validates op and n_ranks
    count = size_bytes // ELEMENT_BYTES
    if op in ("all_gather", "reduce_scatter", "alltoall"):
        per_rank = (count // n_ranks) & ~(_ALIGN_ELEMENTS - 1)
        return Shape(op, n_ranks, per_rank, per_rank * n_ranks * ELEMENT_BYTES)
    return Shape(op, n_ranks, count, count * ELEMENT_BYTES)


def sweep_sizes(min_bytes: int, max_bytes: int, factor: int = 2) -> list[int]:
    """``min_bytes``, ×factor, ... up to and including ``max_bytes`` (nccl-tests ``-b -e -f``)."""
    if min_bytes <= 0 or max_bytes < min_bytes or factor < 2:
        raise ValueError(f"bad sweep: min {min_bytes} B, max {max_bytes} B, factor {factor}")
    sizes, size = [], min_bytes
    while size <= max_bytes:
        sizes.append(size)
        size *= factor
    return sizes


@dataclass(frozen=True)
class SizePlan:
    """The sizes a sweep will run and, when they differ from the profile's, why."""

    sizes: tuple[int, ...]
    note: str = ""


def plan_sizes(min_bytes: int, max_bytes: int, backend: str) -> SizePlan:
    """The profile's sweep, clamped to at most GLOO_MAX_BYTES when the backend is gloo.

    The rule is explicit because a CPU run must say that it did not measure what the profile
    names: the note travels into every result of the sweep.
    """
    if backend != "gloo" or max_bytes <= GLOO_MAX_BYTES:
        return SizePlan(tuple(sweep_sizes(min_bytes, max_bytes)))
    top = GLOO_MAX_BYTES
    low = min(min_bytes, top)
    note = (
        f"backend gloo (CPU): sweep clamped from {_human(min_bytes)}..{_human(max_bytes)} "
        f"to {_human(low)}..{_human(top)}; CPU numbers prove the path, not the fabric"
    )
    return SizePlan(tuple(sweep_sizes(low, top)), note)


def _human(n: int) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale and n % scale == 0:
            return f"{n // scale} {unit}"
    return f"{n} B"


human_bytes = _human


@dataclass(frozen=True)
class SizeResult:
    """One row of a sweep, one placement (nccl-tests prints out-of-place then in-place)."""

    size_bytes: int
    count: int
    in_place: bool
    time_us: float  # mean per iteration of the slowest rank
    algbw: float  # GB/s
    busbw: float  # GB/s
    wrong: int  # elements found wrong, summed over ranks (nccl-tests' #wrong); -1: not checked
    max_error: float = 0.0

    @property
    def correct(self) -> bool:
        """True when the check ran and found nothing wrong."""
        return self.wrong == 0

    @property
    def place(self) -> str:
        """``in-place`` or ``out-of-place``."""
        return "in-place" if self.in_place else "out-of-place"


@dataclass(frozen=True)
class SweepResult:
    """One collective swept over sizes on one communicator (a node, a pair, all nodes)."""

    op: str
    nodes: tuple[str, ...]
    n_ranks: int
    backend: str  # "nccl", "gloo" or "nccl-tests"
    implementation: str  # the call that ran, e.g. "reduce_scatter_tensor"
    rows: tuple[SizeResult, ...]
    warmup_iters: int
    iters: int
    nccl_version: str | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    wrong_places: tuple[str, ...] = ()  # "node1:gpu3" for every rank whose result was wrong
    dtype: str = "float32"
    redop: str = "sum"
    error: str = ""  # the run broke (a tool that died, timed out or was not found)
    # What NCCL was asked to use (None: NCCL chooses per call) and, from its own INFO lines where
    # the job had them written (NcclLog), how it connected the ranks and over which network.
    nccl_algo: str | None = None
    nccl_proto: str | None = None
    transports: tuple[str, ...] = ()  # "NET/IB/GDRDMA", "P2P/CUMEM/read", "SHM/direct/direct", "NVLS"
    network: str | None = None  # NCCL's network module: "IB", "Socket", a plugin's name
    nics: tuple[GpuNics, ...] = ()  # every rank's GPU and the NICs its network channels went through

    def nccl_choice(self) -> str:
        """Algorithm, protocol and transports as a failure message names them, e.g. ``NCCL_ALGO=Ring,
        via NET/IB/GDRDMA + P2P/CUMEM/read``; empty off NCCL."""
        if self.backend == "gloo":
            return ""
        parts = [f"NCCL_ALGO={self.nccl_algo}" if self.nccl_algo else "algorithm NCCL's choice"]
        if self.nccl_proto:
            parts.append(f"NCCL_PROTO={self.nccl_proto}")
        if self.transports:
            parts.append("via " + " + ".join(self.transports))
        return ", ".join(parts)

    @property
    def where(self) -> str:
        """The communicator's nodes as a failure message names them."""
        if len(self.nodes) <= 4:
            return "+".join(self.nodes)
        return f"{len(self.nodes)} nodes ({self.nodes[0]}..{self.nodes[-1]})"

    @property
    def correct(self) -> bool:
        """Every checked row was right (and at least one row exists, and nothing broke)."""
        return not self.error and bool(self.rows) and all(r.correct for r in self.rows)

    def correctness_problems(self) -> list[str]:
        """One line per wrong row, naming the ranks' GPUs; empty when every row is right."""
        problems = [f"{self.where}: {self.op}: {self.error}"] if self.error else []
        for r in self.rows:
            if r.wrong == -1:
                problems.append(f"{self.where}: {self.op} {_human(r.size_bytes)} {r.place}: result not checked")
            elif r.wrong:
                on = f" on {', '.join(self.wrong_places)}" if self.wrong_places else ""
                problems.append(
                    f"{self.where}: {self.op} {_human(r.size_bytes)} {r.place}: {r.wrong} wrong elements "
                    f"(max error {r.max_error:g}){on}"
                )
        if not self.rows:
            problems.append(f"{self.where}: {self.op}: the sweep produced no row")
        return problems

    def judged_row(self, judge_from_bytes: int) -> SizeResult | None:
        """The row a verdict is based on: the lowest busbw over sizes ≥ ``judge_from_bytes``
        (both placements), or the largest size's when the sweep stopped below it."""
        if not self.rows:
            return None
        large = [r for r in self.rows if r.size_bytes >= judge_from_bytes]
        if not large:
            top = max(r.size_bytes for r in self.rows)
            large = [r for r in self.rows if r.size_bytes == top]
        return min(large, key=lambda r: r.busbw)

    def series_points(self) -> list[list[float]]:
        """[[bytes, busbw], ...] per size, the better placement of each size, for a plot."""
        best: dict[int, float] = {}
        for r in self.rows:
            best[r.size_bytes] = max(best.get(r.size_bytes, 0.0), r.busbw)
        return [[float(size), busbw] for size, busbw in sorted(best.items())]

    def table(self) -> list[dict[str, float | int | bool]]:
        """Every row as a plain dict (bytes, count, place, time, algbw, busbw, wrong)."""
        return [
            {
                "bytes": r.size_bytes,
                "count": r.count,
                "in_place": r.in_place,
                "time_us": round(r.time_us, 3),
                "algbw": round(r.algbw, 3),
                "busbw": round(r.busbw, 3),
                "wrong": r.wrong,
            }
            for r in self.rows
        ]


def merge_rows(rows: Iterable[SizeResult]) -> tuple[SizeResult, ...]:
    """Rows sorted as nccl-tests prints them: by size, out-of-place before in-place."""
    return tuple(sorted(rows, key=lambda r: (r.size_bytes, r.in_place)))

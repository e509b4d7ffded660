"""Silent data corruption: every GPU computes the same seeded chain of GEMMs and returns a
fingerprint of the result that the login side compares bit for bit (``checks.sdc``).

One task per GPU (a CPU rank stands in where there is no CUDA). Each computes

    X₀ = M(seed, 0);  Xₖ = Xₖ₋₁ · (I + ¼·M(seed, k)) · 2^-eₖ   for k = 1 … chain

in one fixed dtype with deterministic algorithms on and TF32 and reduced-precision reductions off,
then column sums of X (a reduction) and its fingerprint. M(seed, k) is an n×n matrix filled from
an integer hash of (seed, k, element index) done in int64 arithmetic and turned into floats by
exact operations only, so the inputs are the same bits on every GPU, CPU and library version.
The identity keeps the chain well conditioned (an error in any step stays visible in the result
instead of fading into the product's smallest directions) and eₖ, a power of two taken from the
configuration alone, keeps the magnitudes near one without rounding anything.

The fingerprint, all of it small enough to return from every GPU of a large cluster:
- ``digest``: sha256 of the result's bytes and of the column sums; equal digests, equal bits;
- per block of ``block_elements`` consecutive elements of the result, three integer checksums
  over the elements' 16-bit words taken as signed integers, S0 = Σ w, S1 = Σ (e+1)·w and
  S2 = Σ h(e)·w with e the element's index in the block and h a fixed integer hash of it: exact and
  independent of summation order, so where a single element differs between two GPUs,
  ΔS1 / ΔS0 - 1 is its index, and ΔS2 = h(index)·ΔS0 confirms that it is the only one;
- per block, the float64 sum and sum of magnitudes of the values, to compare against a
  reference computed in another precision within a tolerance (the blocks are the same elements
  whatever the dtype);
- ``samples`` values at fixed indices and ``total``, the float64 sum of everything.
"""

from __future__ import annotations

import hashlib
import math
import os
import socket
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from pytest_gpucluster.workloads.context import TaskContext
from pytest_gpucluster.workloads.distributed import device_for, pick_backend
from pytest_gpucluster.workloads.nvml_util import gpu_label

DTYPES = ("float32", "float64", "bfloat16")
_MASK32 = 0xFFFFFFFF
# Largest block for the weighted checksum: with 16-bit words (|w| ≤ 2¹⁵, 4 per float64) and
# weights up to 2²⁰, S1 and S2 stay below 2⁵⁶, far inside int64.
MAX_BLOCK_ELEMENTS = 2**20
# The chain's step is X·(I + PERTURBATION·M).
PERTURBATION = 0.25


@dataclass(frozen=True)
class SdcConfig:
    """Sizes of the chain; field names follow a profile's ``[sdc]`` table."""

    n: int = 8192
    chain: int = 128
    seed: int = 20240601
    dtype: str = "float32"
    block_elements: int = 2**16
    samples: int = 8

    def __post_init__(self) -> None:
        if self.dtype not in DTYPES:
            raise ValueError(f"sdc dtype {self.dtype!r}: expected one of {', '.join(DTYPES)}")
        if self.n < 2 or self.chain < 1 or self.samples < 1:
            raise ValueError(
                f"sdc sizes n={self.n}, chain={self.chain}, samples={self.samples}: all must be ≥ 1, n ≥ 2"
            )
        if not 1 <= self.block_elements <= MAX_BLOCK_ELEMENTS:
            raise ValueError(f"sdc block_elements={self.block_elements}: expected 1 … {MAX_BLOCK_ELEMENTS}")


# What a CPU rank runs instead of the GPU-sized default.
TINY = SdcConfig(n=256, chain=8, block_elements=4096)


@dataclass(frozen=True)
class SdcResult:
    """One device's chain result: the fingerprint described in the module docstring."""

    node: str
    gpu: str  # gpuN as nvidia-smi numbers it, cpuR for a CPU rank
    device_name: str
    config: SdcConfig
    digest: str
    block_s0: tuple[int, ...]
    block_s1: tuple[int, ...]
    block_s2: tuple[int, ...]
    block_sums: tuple[float, ...]
    block_abs_sums: tuple[float, ...]
    samples: tuple[tuple[int, float], ...]
    total: float
    elapsed_s: float

    @property
    def where(self) -> str:
        """``node:gpuN``, the name a failure carries."""
        return f"{self.node}:{self.gpu}"

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able form (recorded outputs, results files)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SdcResult:
        """The inverse of ``to_dict``."""
        d = dict(data)
        d["config"] = SdcConfig(**d["config"])
        for key in ("block_s0", "block_s1", "block_s2", "block_sums", "block_abs_sums"):
            d[key] = tuple(d[key])
        d["samples"] = tuple((int(i), float(v)) for i, v in d["samples"])
        return cls(**d)


def _torch_dtype(torch: Any, name: str) -> Any:
    return {"float32": torch.float32, "float64": torch.float64, "bfloat16": torch.bfloat16}[name]


def _matrix(torch: Any, n: int, seed: int, k: int, device: Any, dtype: Any) -> Any:
    """M(seed, k): uniform values in [-1, 1) times a power of two near √(3/n), so a product with
    it keeps the scale of its input. Integer hashing in int64 (every product < 2⁶³), 24-bit
    integers to float (exact), then scaling by powers of two (exact)."""
    x = torch.arange(n * n, dtype=torch.int64, device=device)
    x = (x + ((seed * 0x9E3779B1 + k * 0x85EBCA6B) & _MASK32)) & _MASK32
    x = (x * 1103515245 + 12345) & _MASK32
    for _ in range(2):
        x = x ^ (x >> 16)
        x = (x * 0x45D9F3B) & _MASK32
    x = x ^ (x >> 16)
    values = (x >> 8).to(torch.float32) * 2.0**-23 - 1.0
    scale = 2.0 ** -round(math.log2(math.sqrt(n / 3)))
    return (values * scale).to(dtype).reshape(n, n)


def _step_gain_log2(n: int) -> float:
    """log₂ of the expected growth of ‖X‖ per step X·(I + pM): √(1 + p²·n·s²/3), with s the
    scale of M's entries (each of variance s²/3)."""
    scale = 2.0 ** -round(math.log2(math.sqrt(n / 3)))
    return 0.5 * math.log2(1 + PERTURBATION**2 * n * scale**2 / 3)


def chain(config: SdcConfig, device: Any) -> tuple[Any, Any]:
    """(X, column sums of X) on ``device``; call inside ``deterministic``."""
    import torch

    dtype = _torch_dtype(torch, config.dtype)
    n = config.n
    x = _matrix(torch, n, config.seed, 0, device, dtype)
    eye = torch.eye(n, dtype=dtype, device=device)
    gain, shift = _step_gain_log2(n), 0
    for k in range(1, config.chain + 1):
        b = eye + _matrix(torch, n, config.seed, k, device, dtype) * PERTURBATION
        x = x @ b
        due = math.floor(k * gain) - shift
        if due:
            x = x * 2.0**-due
            shift += due
    return x, x.sum(dim=0)


@contextmanager
def deterministic(on_gpu: bool) -> Iterator[None]:
    """Deterministic algorithms on, TF32 and reduced-precision reductions off, for the block;
    the previous settings come back after it."""
    import torch

    matmul = torch.backends.cuda.matmul
    saved = (
        torch.are_deterministic_algorithms_enabled(),
        torch.get_float32_matmul_precision(),
        matmul.allow_tf32,
        matmul.allow_fp16_reduced_precision_reduction,
        matmul.allow_bf16_reduced_precision_reduction,
        torch.backends.cudnn.allow_tf32,
    )
    if on_gpu:
        # cuBLAS reproducibility across streams; takes effect where cuBLAS is not yet initialised.
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(True)
    torch.set_float32_matmul_precision("highest")
    matmul.allow_tf32 = False
    matmul.allow_fp16_reduced_precision_reduction = False
    matmul.allow_bf16_reduced_precision_reduction = False
    torch.backends.cudnn.allow_tf32 = False
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(saved[0])
        torch.set_float32_matmul_precision(saved[1])
        matmul.allow_tf32 = saved[2]
        matmul.allow_fp16_reduced_precision_reduction = saved[3]
        matmul.allow_bf16_reduced_precision_reduction = saved[4]
        torch.backends.cudnn.allow_tf32 = saved[5]


def scramble(index: Any) -> Any:
    """h(e), the third checksum's weight of in-block index ``e`` (an int or an int64 tensor): an
    integer hash of e into 1 … 2²⁰, far from linear, so that changes of several elements that
    happen to point S1 at one element do not also fit S2."""
    x = (index * 0x9E3779B1) & _MASK32
    x = x ^ (x >> 15)
    x = (x * 0x2C1B3C6D) & _MASK32
    x = x ^ (x >> 12)
    return (x & (MAX_BLOCK_ELEMENTS - 1)) + 1


def _blocks(torch: Any, flat: Any, size: int, fill: Any) -> Any:
    """``flat`` as rows of ``size`` (the last one padded with ``fill``)."""
    rows = math.ceil(flat.numel() / size)
    padded = torch.full((rows * size,), fill, dtype=flat.dtype, device=flat.device)
    padded[: flat.numel()] = flat
    return padded.reshape(rows, size)


def fingerprint(x: Any, colsum: Any, config: SdcConfig) -> dict[str, Any]:
    """The fingerprint fields of ``SdcResult`` for result ``x`` and its column sums."""
    import torch

    flat = x.contiguous().reshape(-1)
    count, size = flat.numel(), config.block_elements
    words = flat.view(torch.int16).reshape(count, -1).to(torch.int64)  # (elements, 16-bit words of each)
    by_element = _blocks(torch, words.sum(dim=1), size, 0)
    weights = torch.arange(1, size + 1, dtype=torch.int64, device=flat.device)
    values = _blocks(torch, flat.to(torch.float64), size, 0.0)

    step = max(1, count // config.samples)
    indices = [min(count - 1, i * step + step // 2) for i in range(config.samples)]
    sampled = flat.to(torch.float64)[indices].cpu().tolist()
    digest = hashlib.sha256()
    digest.update(flat.view(torch.uint8).cpu().numpy().tobytes())
    digest.update(colsum.contiguous().view(torch.uint8).cpu().numpy().tobytes())
    return {
        "digest": digest.hexdigest(),
        "block_s0": tuple(int(v) for v in by_element.sum(dim=1).cpu().tolist()),
        "block_s1": tuple(int(v) for v in (by_element * weights).sum(dim=1).cpu().tolist()),
        "block_s2": tuple(int(v) for v in (by_element * scramble(weights - 1)).sum(dim=1).cpu().tolist()),
        "block_sums": tuple(float(v) for v in values.sum(dim=1).cpu().tolist()),
        "block_abs_sums": tuple(float(v) for v in values.abs().sum(dim=1).cpu().tolist()),
        "samples": tuple(zip(indices, (float(v) for v in sampled), strict=True)),
        "total": float(flat.to(torch.float64).sum().item()),
    }


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return "cpu: " + line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "cpu"


def compute(config: SdcConfig, *, device: Any = None, node: str = "", gpu: str = "cpu0") -> SdcResult:
    """The chain and its fingerprint on ``device`` (the CPU when None), outside any job: the
    workload's body, and the login side's reference (float64 on the CPU at a small size)."""
    import torch

    device = torch.device("cpu") if device is None else device
    on_gpu = device.type == "cuda"
    t0 = time.monotonic()
    with deterministic(on_gpu):
        x, colsum = chain(config, device)
        fields_ = fingerprint(x, colsum, config)
    if on_gpu:
        torch.cuda.synchronize(device)
    name = torch.cuda.get_device_name(device) if on_gpu else _cpu_name()
    del x, colsum
    if on_gpu:
        torch.cuda.empty_cache()
    return SdcResult(
        node=node or socket.gethostname(),
        gpu=gpu,
        device_name=name,
        config=config,
        elapsed_s=time.monotonic() - t0,
        **fields_,
    )


def reference(config: SdcConfig) -> SdcResult:
    """The chain in float64 on this CPU, for the login side to judge every GPU against within a
    tolerance; meant for small sizes (float64 GEMMs on one CPU are slow)."""
    return compute(replace(config, dtype="float64"), node="reference", gpu="cpu")


def run(ctx: TaskContext, *, config: SdcConfig, backend: str | None = None) -> SdcResult:
    """Run on each GPU (one task per GPU): the chain on this task's GPU, or on the CPU with one
    thread (bit-reproducible) where the job's backend is gloo."""
    import torch

    on_gpu = pick_backend(backend) == "nccl"
    device = device_for(ctx, "nccl" if on_gpu else "gloo")
    if on_gpu:
        torch.cuda.set_device(device)
    else:
        torch.set_num_threads(1)
    return compute(config, device=device, node=ctx.hostname, gpu=gpu_label(device, ctx.local_rank))

"""What a GPU model's datasheet promises for the speeds the suite measures, so the report can say a
measured figure's share of it (``735 TFLOP/s, 74 % of the 989 TFLOP/s spec``). Only datasheet
figures of models known exactly by the name NVML gives: a name that could be several boards (an
"H100" without its memory, a PCIe or NVL board) has none, and the report states no share.
The share is told, never judged: the lines stay in thresholds.toml.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Spec:
    """A datasheet figure: its value, unit and where it is stated."""

    value: float
    unit: str
    source: str


_H100_SXM = "NVIDIA H100 SXM5 datasheet"
_H100_PCIE = "NVIDIA H100 PCIe datasheet"
_H100_NVL = "NVIDIA H100 NVL datasheet (per GPU)"
_H200_SXM = "NVIDIA H200 SXM datasheet"
_H200_NVL = "NVIDIA H200 NVL datasheet"
_B200 = "NVIDIA HGX B200 datasheet (per GPU, 1 000 W)"
_A100 = "NVIDIA A100 datasheet"


def _figures(source: str, tflops: float, tbps: float, memory: str) -> Mapping[str, Spec]:
    return {
        "compute.matmul_bf16": Spec(tflops, "TFLOP/s", f"{source}: BF16 dense"),
        "compute.memcopy": Spec(tbps, "TB/s", f"{source}: {memory} bandwidth"),
    }


# (what the NVML name must contain, what it must not) → the figures by metric. Dense bf16 is half
# the datasheet's "with sparsity" figure; HBM bandwidth counts bytes read plus written, as the
# suite's copy does (config/metrics.py).
SPECS: tuple[tuple[tuple[str, ...], tuple[str, ...], Mapping[str, Spec]], ...] = (
    (("H100", "HBM3"), ("PCIe", "NVL"), _figures(_H100_SXM, 989.0, 3.35, "HBM3")),
    (("H100", "PCIe"), (), _figures(_H100_PCIE, 756.0, 2.0, "HBM2e")),
    (("H100", "NVL"), (), _figures(_H100_NVL, 835.0, 3.9, "HBM3")),
    (("H200",), ("NVL",), _figures(_H200_SXM, 989.0, 4.8, "HBM3e")),
    (("H200", "NVL"), (), _figures(_H200_NVL, 835.0, 4.8, "HBM3e")),
    (("B200",), ("GB200",), _figures(_B200, 2250.0, 8.0, "HBM3e")),
    # NVML's A100 names carry the board and the memory: A100-SXM4-80GB, A100-SXM4-40GB,
    # A100 80GB PCIe, A100-PCIE-40GB.
    (("A100", "SXM4", "80GB"), (), _figures(_A100, 312.0, 2.039, "HBM2e")),
    (("A100", "SXM4", "40GB"), (), _figures(_A100, 312.0, 1.555, "HBM2")),
    (("A100", "80GB", "PCIe"), (), _figures(_A100, 312.0, 1.935, "HBM2e")),
    (("A100", "PCIE-40GB"), (), _figures(_A100, 312.0, 1.555, "HBM2")),
)


def spec_of(model: str, metric: str) -> Spec | None:
    """The datasheet figure of ``metric`` for the GPU ``model`` (NVML's name), or None."""
    for needed, excluded, figures in SPECS:
        if all(n in model for n in needed) and not any(x in model for x in excluded):
            return figures.get(metric)
    return None


def share(value: Any, unit: str, spec: Spec | None) -> str:
    """``74 % of the 989 TFLOP/s spec``; "" without a spec or where the units differ."""
    if spec is None or spec.unit != unit or not isinstance(value, int | float) or spec.value <= 0:
        return ""
    return f"{100 * float(value) / spec.value:.0f} % of the {spec.value:g} {spec.unit} spec"


def model_of(names: Iterable[str], fallback: str) -> str:
    """The one GPU model a run's inventory names (NVML's name), else ``fallback`` (the profile's)."""
    found = {n for n in names if n}
    return found.pop() if len(found) == 1 else fallback

"""Whether this task's Python environment can use the GPUs the job was given.

A torch built for a CUDA the node's driver cannot run (a fresh resolve picking CUDA 13 wheels for
a driver of the 535 branch), or a CPU build of torch, sees no GPU while NVML sees every one. The
node is healthy; the run's environment is not. Left alone, the workloads would take their CPU path
and be judged slow, or report ``torch.cuda.device_count() = 0``, and a healthy node would be
rejected for a packaging fault. Instead a task given GPUs that torch cannot use raises
``TorchCannotUseGpus`` before any collective or measurement: its record travels back beside the
task's result (``launch/node.py``), and the login side names the environment, not the node.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass

# Set by the task's entry point (launch/node.py): "1" when the job was given GPUs.
GIVEN_GPUS_ENV = "PYTEST_GPUCLUSTER_GIVEN_GPUS"


@dataclass(frozen=True)
class TorchGpuMismatch:
    """NVML sees GPUs on ``node`` that torch cannot use, and what each of them says."""

    node: str
    torch: str  # torch.__version__, e.g. "2.13.0+cu130"
    torch_cuda: str  # torch.version.cuda ("" for a CPU build)
    driver: str  # the driver NVML reports, e.g. "535.183.01"
    nvml_gpus: int
    error: str  # what CUDA said when torch tried it

    def what(self) -> str:
        """``torch 2.13.0+cu130 (CUDA 13.0) cannot use driver 535.183.01``: the same on every node
        of one environment, so the login side names it once with every node."""
        build = f"CUDA {self.torch_cuda}" if self.torch_cuda else "a CPU build"
        return f"torch {self.torch} ({build}) cannot use driver {self.driver or '?'}"

    def sentence(self) -> str:
        """One line naming the environment, the node and CUDA's own words."""
        return f"{self.what()} on {self.node}: {self.error or 'torch sees no GPU'} (NVML sees {self.nvml_gpus} GPU(s))"


class TorchCannotUseGpus(RuntimeError):
    """Raised on the node where torch cannot use the GPUs NVML sees; ``record`` says why."""

    def __init__(self, record: TorchGpuMismatch) -> None:
        self.record = record
        super().__init__(record.sentence())

    def __reduce__(self) -> tuple[type[TorchCannotUseGpus], tuple[TorchGpuMismatch]]:
        return (type(self), (self.record,))


def mismatch(
    *,
    given_gpus: bool,
    torch_gpus: int,
    nvml: tuple[int, str] | None,
    torch_version: str,
    torch_cuda: str,
    error: str,
    node: str,
) -> TorchGpuMismatch | None:
    """The mismatch, when a task given GPUs finds none through torch while NVML (``nvml``: the
    GPU count and the driver version, None where NVML cannot be read) sees some; else None. A task
    given no GPUs, a torch that sees them, or a node without NVML (GPUs that are only GRES entries,
    the CPU stand-in path) is no mismatch."""
    if not given_gpus or torch_gpus > 0 or nvml is None or nvml[0] <= 0:
        return None
    return TorchGpuMismatch(node, torch_version, torch_cuda, nvml[1], nvml[0], error)


def _nvml() -> tuple[int, str] | None:
    """(GPU count, driver version) as NVML sees them on this node, or None where it cannot."""
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:
        return None
    try:
        driver = pynvml.nvmlSystemGetDriverVersion()
        return int(pynvml.nvmlDeviceGetCount()), driver.decode() if isinstance(driver, bytes) else str(driver)
    except Exception:
        return None
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:
            pass


def _cuda_error(torch: object) -> str:
    """What CUDA says when torch initialises it here: the first line of the error."""
    try:
        torch.cuda.init()  # type: ignore[attr-defined]
    except Exception as exc:
        return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return ""


def check_torch_can_use_gpus() -> None:
    """Raise ``TorchCannotUseGpus`` in a task given GPUs that torch cannot use while NVML sees
    them; return quietly everywhere else (torch sees its GPUs, the task has none, no NVML)."""
    if os.environ.get(GIVEN_GPUS_ENV) != "1":
        return
    import torch

    seen = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if seen > 0:
        return
    found = mismatch(
        given_gpus=True,
        torch_gpus=seen,
        nvml=_nvml(),
        torch_version=str(torch.__version__),
        torch_cuda=str(torch.version.cuda or ""),
        error=_cuda_error(torch),
        node=socket.gethostname(),
    )
    if found is not None:
        raise TorchCannotUseGpus(found)

"""Writes the recorded SDC outputs beside this file: the CPU path's result at the tiny size, the
float64 reference, and the same result with one bit of one element flipped (as a GPU with silent
corruption would return it). Run from the repository root: ``.venv/bin/python tests/data/sdc/record.py``."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from pytest_gpucluster.workloads import sdc

HERE = Path(__file__).parent
ELEMENT = 3 * 4096 + 1234  # in block 3 of 16
BITS = {"low_mantissa": 2, "exponent": 30}


def _save(name: str, result: sdc.SdcResult) -> None:
    (HERE / name).write_text(json.dumps(result.to_dict(), indent=1) + "\n")


def main() -> None:
    config = sdc.TINY
    torch.set_num_threads(1)
    _save("cpu_tiny.json", sdc.compute(config, node="recorded", gpu="cpu0"))
    _save("reference_float64.json", sdc.reference(config))
    with sdc.deterministic(on_gpu=False):
        x, colsum = sdc.chain(config, torch.device("cpu"))
    for label, bit in BITS.items():
        flipped = x.clone().reshape(-1)
        flipped.view(torch.int32)[ELEMENT] ^= 1 << bit
        fields = sdc.fingerprint(flipped.reshape(x.shape), colsum, config)
        result = sdc.SdcResult(node="recorded", gpu="cpu0", device_name="cpu", config=config, elapsed_s=0.0, **fields)
        _save(f"cpu_tiny_flip_{label}.json", result)


if __name__ == "__main__":
    main()

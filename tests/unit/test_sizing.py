"""Sizes larger than GPU memory are refused on the login node, with the numbers and the key."""

from __future__ import annotations

import math

import pytest

from pytest_gpucluster.errors import ConfigError
from pytest_gpucluster.plan.sizing import GiB, check_fits

H100 = 80 * GiB


def test_a_size_that_fits_passes() -> None:
    check_fits(8 * GiB, H100, "nccl max_bytes")
    check_fits(78 * GiB, H100, "exactly up to the reserve")


def test_too_large_is_refused_with_numbers_and_what() -> None:
    with pytest.raises(ConfigError) as info:
        check_fits(2 * 64 * GiB, H100, "[profiles.x.nccl] max_bytes (2 buffers of 64 GiB)")
    assert str(info.value) == (
        "[profiles.x.nccl] max_bytes (2 buffers of 64 GiB): needs 128.00 GiB per GPU but a GPU has "
        "80.00 GiB (78.00 GiB usable after a 2.00 GiB reserve); lower the size so the job is not "
        "launched only to run out of memory on every node."
    )


def test_the_reserve_counts() -> None:
    with pytest.raises(ConfigError, match=r"needs 79\.00 GiB"):
        check_fits(79 * GiB, H100, "copy_bytes")
    check_fits(79 * GiB, H100, "copy_bytes", reserve_bytes=0)


@pytest.mark.parametrize("bad", [math.nan, math.inf, -1, True, "1GiB"])
def test_nonsense_numbers_are_refused(bad: object) -> None:
    with pytest.raises(ConfigError, match="bytes needed must be a finite number of bytes"):
        check_fits(bad, H100, "what")  # type: ignore[arg-type]


def test_unknown_gpu_memory_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"GPU memory size unknown \(0 bytes\)"):
        check_fits(GiB, 0, "what")


def test_gpu_memory_by_model_name():
    from pytest_gpucluster.plan.sizing import gpu_memory_bytes

    assert gpu_memory_bytes("NVIDIA H200") == 143771 * 2**20
    assert gpu_memory_bytes("NVIDIA H100 80GB HBM3") == 81559 * 2**20
    assert gpu_memory_bytes("NVIDIA H100 NVL") == 95830 * 2**20
    assert gpu_memory_bytes("cpu") is None
    assert gpu_memory_bytes(None) is None

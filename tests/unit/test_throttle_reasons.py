"""NVML clock-event (throttle) reason decoding."""

from __future__ import annotations

import pytest

from pytest_gpucluster.workloads.nvml_util import (
    FAILING_REASONS,
    THROTTLE_BITS,
    decode_throttle_reasons,
    failing_reasons,
    physical_index,
)


def test_bits_match_the_nvml_bindings():
    pynvml = pytest.importorskip("pynvml")
    assert THROTTLE_BITS[pynvml.nvmlClocksThrottleReasonGpuIdle] == "gpu_idle"
    assert THROTTLE_BITS[pynvml.nvmlClocksThrottleReasonSwPowerCap] == "sw_power_cap"
    assert THROTTLE_BITS[pynvml.nvmlClocksThrottleReasonHwSlowdown] == "hw_slowdown"
    assert THROTTLE_BITS[pynvml.nvmlClocksThrottleReasonSwThermalSlowdown] == "sw_thermal_slowdown"
    assert THROTTLE_BITS[pynvml.nvmlClocksThrottleReasonHwThermalSlowdown] == "hw_thermal_slowdown"
    assert THROTTLE_BITS[pynvml.nvmlClocksThrottleReasonHwPowerBrakeSlowdown] == "hw_power_brake_slowdown"
    assert sum(THROTTLE_BITS) == pynvml.nvmlClocksThrottleReasonAll


def test_decode_names_every_set_bit_lowest_first():
    assert decode_throttle_reasons(0) == ()
    assert decode_throttle_reasons(0x1) == ("gpu_idle",)
    assert decode_throttle_reasons(0x4 | 0x40) == ("sw_power_cap", "hw_thermal_slowdown")


def test_unknown_bits_are_named_not_dropped():
    assert decode_throttle_reasons(0x800 | 0x4) == ("sw_power_cap", "bit_0x800")


def test_power_cap_under_load_is_not_a_failure():
    # A healthy H100/H200 under full GEMM load reports SW power cap: the driver keeps it at TDP.
    assert failing_reasons(0x4) == ()
    assert failing_reasons(0x1 | 0x10) == ()


@pytest.mark.parametrize(
    ("mask", "expected"),
    [
        (0x8, ("hw_slowdown",)),
        (0x20, ("sw_thermal_slowdown",)),
        (0x40 | 0x8, ("hw_slowdown", "hw_thermal_slowdown")),
        (0x80 | 0x4, ("hw_power_brake_slowdown",)),
    ],
)
def test_thermal_and_hardware_power_slowdowns_fail(mask, expected):
    assert failing_reasons(mask) == expected
    assert set(expected) <= FAILING_REASONS


def test_physical_index_follows_cuda_visible_devices():
    assert physical_index(1, "4,5,6") == 5
    assert physical_index(0, "") == 0
    assert physical_index(2, "GPU-aaaa,GPU-bbbb,GPU-cccc") == 2  # UUIDs: NVML resolves those

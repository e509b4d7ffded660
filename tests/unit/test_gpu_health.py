"""GPU health judging on readings of sick GPUs, written as the dataclasses the workload returns."""

from __future__ import annotations

import math
from dataclasses import replace

from pytest_gpucluster.checks import gpu_health as gh_checks
from pytest_gpucluster.workloads import gpu_health as gh
from pytest_gpucluster.workloads.context import local_context

H100 = "NVIDIA H100 80GB HBM3"


def _gpu(i: int, **sick) -> gh.GpuHealth:
    healthy = gh.GpuHealth(
        index=i,
        name=H100,
        uuid=f"GPU-{i:08d}",
        pci_bus_id=f"00000000:{i:02X}:00.0",
        temperature_c=31.0,
        memory_temperature_c=29.0,
        memory_used_mib=0.5,
        ecc_volatile_uncorrectable=0,
        retired_pages_pending=None,
        remapped_rows_pending=0,
        remapped_rows_failed=0,
        nvlinks=(True,) * 18,
        pcie_gen=(1, 5, 5),
        pcie_width=(16, 16),
        clock_reasons=0x1,
        unsupported=("retired pages",),
    )
    return replace(healthy, **sick)


def _node(*gpus: gh.GpuHealth, **kw) -> gh.NodeGpus:
    return gh.NodeGpus(**{"node": "w0", "driver": "550.54.15", "cuda": "12.4", "gpus": gpus, **kw})


def _texts(found):
    return [f.text for f in found]


def test_healthy_node_passes_everything():
    node = _node(*(_gpu(i) for i in range(8)))
    assert gh_checks.inventory_findings(node, count=8, model="H100") == []
    assert gh_checks.link_findings(node) == []
    readings, unsupported = gh_checks.health_readings(node)
    assert unsupported == []  # retired pages are not supported, row remapping stands in for them
    temp = next(m for m in readings if m.metric == "gpu.temperature" and m.gpu == 3)
    assert (temp.value, temp.unit, temp.nodes, temp.where) == (31.0, "C", ("w0",), "w0:gpu3")
    assert not any(m.metric == "gpu.retired_pages_pending" for m in readings)


def test_every_bad_gpu_is_listed():
    node = _node(
        _gpu(0),
        _gpu(1, nvlinks=(True,) * 16 + (False, False)),
        _gpu(2, pcie_width=(8, 16)),
        _gpu(3, clock_reasons=0x1 | 0x40),
        _gpu(4, nvlinks=None),
        _gpu(5, pcie_gen=(4, 4, 5)),  # slot limits the link: a warning, not a failure
        _gpu(6, pcie_gen=(1, 5, 5)),  # idle downshift: nothing
        _gpu(7, nvlinks=(True,) * 5 + (False,) + (True,) * 12),
    )
    found = gh_checks.link_findings(node)
    assert [(f.text, f.scope, f.gpu, f.port, f.severity) for f in found] == [
        ("w0:gpu1: NVLink(s) [16, 17] down (16 of 18 up)", "gpu", 1, "", "fail"),
        ("w0:gpu2: PCIe link x8, the link supports x16 (lanes lost)", "gpu", 2, "", "fail"),
        ("w0:gpu3: clocks held down by hw_thermal_slowdown (reasons 0x41)", "gpu", 3, "", "fail"),
        ("w0:gpu4: reports no NVLink while other GPUs of the node have 18 links", "gpu", 4, "", "fail"),
        ("w0:gpu5: PCIe link can reach Gen4 only, the GPU supports Gen5", "gpu", 5, "", "warn"),
        ("w0:gpu7: NVLink(s) [5] down (17 of 18 up)", "port", 7, "link 5", "fail"),
    ]
    assert {(f.nodes, f.culprits) for f in found} == {(("w0",), ("w0",))}
    assert found[-1].place == "w0:gpu7 link 5"


def test_sick_memory_readings_are_judged_values():
    node = _node(_gpu(0, ecc_volatile_uncorrectable=3, remapped_rows_pending=1, temperature_c=91.0), _gpu(1))
    readings, _ = gh_checks.health_readings(node)
    of_gpu0 = {m.metric: m.value for m in readings if m.gpu == 0 and m.nodes == ("w0",)}
    assert of_gpu0["gpu.ecc_volatile_uncorrectable"] == 3.0
    assert of_gpu0["gpu.remapped_rows_pending"] == 1.0
    assert of_gpu0["gpu.temperature"] == 91.0


def test_not_supported_is_never_a_pass():
    gpu = _gpu(
        0,
        memory_temperature_c=None,
        remapped_rows_pending=None,
        remapped_rows_failed=None,
        unsupported=("memory temperature", "remapped rows", "retired pages"),
    )
    readings, unsupported = gh_checks.health_readings(_node(gpu))
    assert _texts(unsupported) == [
        "w0:gpu0: gpu.memory_temperature not supported by NVML; not measured",
        "w0:gpu0: gpu.retired_pages_pending not supported by NVML; not measured",
        "w0:gpu0: gpu.remapped_rows_pending not supported by NVML; not measured",
        "w0:gpu0: gpu.remapped_rows_failed not supported by NVML; not measured",
    ]
    assert {(f.scope, f.gpu, f.severity) for f in unsupported} == {("gpu", 0, "warn")}
    measured = {m.metric for m in readings}
    assert measured == {"gpu.temperature", "gpu.memory_used_at_rest", "gpu.ecc_volatile_uncorrectable"}
    no_clocks = _gpu(1, clock_reasons=None, unsupported=("clock event reasons",))
    (warned,) = gh_checks.link_findings(_node(no_clocks))
    assert (warned.text, warned.gpu, warned.severity) == (
        "w0:gpu1: clock event reasons not supported by NVML; not checked",
        1,
        "warn",
    )


def test_node_without_nvml_fails_every_metric():
    node = _node(error="NVML unusable: Driver Not Loaded")
    readings, _ = gh_checks.health_readings(node)
    assert len(readings) == len(gh_checks.HEALTH_METRICS)
    assert all(math.isnan(m.value) and m.nodes == ("w0",) and m.gpu is None for m in readings)
    assert {m.detail for m in readings} == {"NVML unusable: Driver Not Loaded"}
    (found,) = gh_checks.inventory_findings(node, count=8, model=None)
    assert (found.text, found.scope, found.culprits) == ("w0: NVML unusable: Driver Not Loaded", "node", ("w0",))
    (found,) = gh_checks.link_findings(node)
    assert (found.text, found.scope) == ("w0: NVML unusable: Driver Not Loaded; links and clocks not checked", "node")


def test_inventory_and_versions():
    node = _node(_gpu(0), _gpu(1, name="NVIDIA A100-SXM4-80GB"), _gpu(2, errors=("temperature: Unknown Error",)))
    assert [(f.text, f.scope, f.gpu) for f in gh_checks.inventory_findings(node, count=8, model="H100")] == [
        ("w0: 3 GPU(s) visible to NVML, expected 8", "node", None),
        ("w0:gpu1: is 'NVIDIA A100-SXM4-80GB', expected 'H100'", "gpu", 1),
        ("w0:gpu2: temperature: Unknown Error", "gpu", 2),
    ]
    other = replace(_node(_gpu(0)), node="w1", driver="535.104.05", cuda="12.2")
    found = gh_checks.version_findings([node, other], min_driver="550", min_cuda="12.3")
    # two nodes, two versions: no majority, so the difference convicts neither
    assert [(f.text, f.nodes, f.culprits) for f in found] == [
        ("driver versions differ: 550.54.15 on w0; 535.104.05 on w1", ("w0", "w1"), ()),
        ("w1: driver 535.104.05 is older than the profile's minimum 550", ("w1",), ("w1",)),
        ("CUDA versions differ: 12.4 on w0; 12.2 on w1", ("w0", "w1"), ()),
        ("w1: CUDA 12.2 is older than the profile's minimum 12.3", ("w1",), ("w1",)),
    ]


def test_a_driver_differing_from_a_strict_majority_is_the_culprit():
    a, b, c = (replace(_node(_gpu(0)), node=n) for n in ("w0", "w1", "w2"))
    odd = replace(c, driver="535.104.05")
    (found,) = gh_checks.version_findings([a, b, odd], min_driver=None, min_cuda=None)
    assert (found.scope, found.nodes, found.culprits) == ("nodes", ("w0", "w1", "w2"), ("w2",))
    assert found.text == "driver versions differ: 550.54.15 on w0, w1; 535.104.05 on w2"
    old = [replace(n, driver="535.104.05") for n in (a, b)]
    (found,) = gh_checks.version_findings([*old, c], min_driver="550", min_cuda=None)[1:]
    assert (found.text, found.scope, found.culprits) == (
        "w0, w1: driver 535.104.05 is older than the profile's minimum 550",
        "nodes",
        ("w0", "w1"),
    )
    d = replace(c, node="w3", driver="560.1")
    (found,) = gh_checks.version_findings([a, b, odd, d], min_driver=None, min_cuda=None)
    assert found.culprits == ()  # 2 of 4 is no strict majority


def test_read_node_without_a_driver_reports_instead_of_crashing():
    node = gh.read_node(local_context())
    assert node.error.startswith(("NVML unusable", "NVML:")) or node.gpus


def test_nvml_errors_are_sorted_into_not_supported_and_errors():
    import pynvml

    def fail(code):
        def call():
            raise pynvml.NVMLError(code)

        return call

    reader = gh._Reader(pynvml)
    assert reader.get("remapped rows", fail(pynvml.NVML_ERROR_NOT_SUPPORTED)) is None
    assert reader.get("temperature", fail(pynvml.NVML_ERROR_UNKNOWN)) is None
    assert reader.get("memory info", lambda: 7) == 7
    assert reader.unsupported == ["remapped rows"]
    assert len(reader.errors) == 1 and reader.errors[0].startswith("temperature: ")

"""The local executor's node under the caller's CUDA_VISIBLE_DEVICES: which of the machine's GPUs
it is (indices or UUIDs read as CUDA reads them, mapped to NVML's numbering), what its tasks get,
and which GPUs its node-wide NVML readings cover. Plain data, and one real local job."""

from __future__ import annotations

import pytest

from pytest_gpucluster.errors import ConfigError
from pytest_gpucluster.launch import JobSpec
from pytest_gpucluster.launch.local_backend import LocalLauncher
from pytest_gpucluster.launch.local_gpus import local_gpus
from pytest_gpucluster.workloads.isolation import gpu_view
from pytest_gpucluster.workloads.nvml_util import NODE_GPUS_ENV, node_gpu_indices, visible_indices

UUIDS = [
    "GPU-1a2b3c4d-0000-1111-2222-333344445555",
    "GPU-1a2b9999-0000-1111-2222-333344445555",
    "GPU-77aa0000-0000-1111-2222-333344445555",
    "GPU-88bb0000-0000-1111-2222-333344445555",
]
FOUR_H100 = [(u, "NVIDIA H100 80GB HBM3") for u in UUIDS]


@pytest.mark.parametrize(
    ("visible", "indices"),
    [
        ("0,1,2", (0, 1, 2)),
        ("2,3", (2, 3)),
        ("3, 1", (3, 1)),  # the caller's order: CUDA device 0 is GPU 3
        ("", ()),
        ("-1", ()),
        ("1,-1,2", (1,)),  # CUDA reads up to the first negative index
        ("GPU-77aa", (2,)),
        ("GPU-88bb0000-0000-1111-2222-333344445555,0", (3, 0)),
    ],
)
def test_visible_devices_map_to_nvml_indices(visible, indices):
    assert visible_indices(visible, UUIDS) == indices


@pytest.mark.parametrize(
    ("visible", "said"),
    [
        ("4", "'4': no GPU 4 on this machine (NVML finds 4: 0-3)"),
        ("GPU-1a2b", "'GPU-1a2b' fits GPUs 0, 1; give enough of the UUID"),
        ("GPU-ffff", "'GPU-ffff' fits no GPU on this machine"),
        ("MIG-5c3e1a", "'MIG-5c3e1a' is a MIG device; name whole GPUs"),
        ("0,GPU-1a2b3c", "'GPU-1a2b3c' names GPU 0 a second time"),
        ("0,,1", "'' is neither a GPU index nor a GPU- UUID"),
        ("gpu0", "'gpu0' is neither a GPU index nor a GPU- UUID"),
    ],
)
def test_visible_devices_cuda_would_misread_are_refused(visible, said):
    with pytest.raises(ValueError) as err:
        visible_indices(visible, UUIDS)
    assert str(err.value).startswith(said)


def test_the_node_is_what_the_caller_exposes():
    gpus = local_gpus({"CUDA_VISIBLE_DEVICES": "2,3"}, lambda: FOUR_H100)
    assert (gpus.indices, gpus.total, gpus.model) == ((2, 3), 4, "NVIDIA H100 80GB HBM3")
    assert gpus.describe() == "CUDA_VISIBLE_DEVICES=2,3: 2 of 4 GPUs"
    assert gpus.task_env() == {NODE_GPUS_ENV: "2,3", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}


def test_without_the_variable_the_node_is_every_gpu():
    gpus = local_gpus({}, lambda: FOUR_H100)
    assert gpus.indices == (0, 1, 2, 3) and not gpus.restricted and gpus.describe() == "" and gpus.task_env() == {}


def test_an_empty_variable_exposes_no_gpu():
    gpus = local_gpus({"CUDA_VISIBLE_DEVICES": ""}, lambda: FOUR_H100)
    assert gpus.indices == () and gpus.model is None and gpus.describe() == "CUDA_VISIBLE_DEVICES=: 0 of 4 GPUs"
    assert gpus.task_env()[NODE_GPUS_ENV] == ""


def test_on_a_machine_without_gpus_indices_expose_none_and_nonsense_is_still_refused():
    gpus = local_gpus({"CUDA_VISIBLE_DEVICES": "0,1,2"}, list)
    assert gpus.indices == () and gpus.describe() == "CUDA_VISIBLE_DEVICES=0,1,2: no GPU on this machine"
    with pytest.raises(ConfigError, match=r"^CUDA_VISIBLE_DEVICES=MIG-1: .MIG-1. is a MIG device"):
        local_gpus({"CUDA_VISIBLE_DEVICES": "MIG-1"}, list)


def test_a_bad_variable_is_a_config_error_naming_it():
    with pytest.raises(ConfigError) as err:
        local_gpus({"CUDA_VISIBLE_DEVICES": "0,7"}, lambda: FOUR_H100)
    text = str(err.value)
    assert text.startswith("CUDA_VISIBLE_DEVICES=0,7: '7': no GPU 7 on this machine")
    assert "set it to GPU indices (0, 1, 2, 3) or GPU- UUIDs" in text


def test_node_wide_readings_cover_the_nodes_gpus():
    assert node_gpu_indices(4, {}) == [0, 1, 2, 3]
    assert node_gpu_indices(4, {NODE_GPUS_ENV: "2,3"}) == [2, 3]
    assert node_gpu_indices(4, {NODE_GPUS_ENV: ""}) == []
    assert node_gpu_indices(2, {NODE_GPUS_ENV: "1,3"}) == [1]  # a GPU gone since the run started


@pytest.mark.parametrize(("asked", "seen"), [(2, "2,3"), (1, "2")])
def test_tasks_get_the_callers_gpus_not_the_first_ones(tmp_path, asked, seen):
    gpus = local_gpus({"CUDA_VISIBLE_DEVICES": "2,3"}, lambda: FOUR_H100)
    launcher = LocalLauncher(folder=tmp_path, queue_timeout_s=60, poll_s=0.05, visible_gpus=gpus.indices)
    job = launcher.submit(gpu_view, JobSpec(name="cvd", nodes=1, gpus_per_node=asked, timeout_min=2), real=False)
    (view,) = [r.value for r in job.results()]
    assert view.cuda_visible_devices == seen

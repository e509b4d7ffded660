"""A task given GPUs that torch cannot use while NVML sees them: the environment's fault, said once
with every node, never a node's (workloads/gpu_environment.py, launch/node.py, launch/job.py)."""

from __future__ import annotations

import pickle
from pathlib import Path

from pytest_gpucluster.launch import task_files
from pytest_gpucluster.launch.node import environment_path
from pytest_gpucluster.workloads.gpu_environment import TorchCannotUseGpus, TorchGpuMismatch, mismatch

DATA = Path(__file__).resolve().parents[1] / "data" / "gpu_environment"
TOO_OLD = (DATA / "torch_cu130_driver_535_representative_sample.txt").read_text().strip()


def _found(**changes):
    facts = {
        "given_gpus": True,
        "torch_gpus": 0,
        "nvml": (8, "535.183.01"),
        "torch_version": "2.13.0+cu130",
        "torch_cuda": "13.0",
        "error": TOO_OLD,
        "node": "gpu-07",
    }
    return mismatch(**{**facts, **changes})


def test_nvml_gpus_that_torch_cannot_use_are_a_mismatch_naming_build_driver_and_node():
    found = _found()
    assert found == TorchGpuMismatch("gpu-07", "2.13.0+cu130", "13.0", "535.183.01", 8, TOO_OLD)
    assert found.what() == "torch 2.13.0+cu130 (CUDA 13.0) cannot use driver 535.183.01"
    assert found.sentence().startswith("torch 2.13.0+cu130 (CUDA 13.0) cannot use driver 535.183.01 on gpu-07: ")
    assert found.sentence().endswith("(NVML sees 8 GPU(s))")
    cpu_build = _found(torch_version="2.13.0+cpu", torch_cuda="", error="Torch not compiled with CUDA enabled")
    assert cpu_build.what() == "torch 2.13.0+cpu (a CPU build) cannot use driver 535.183.01"


def test_no_mismatch_without_given_gpus_without_nvml_or_when_torch_sees_them():
    assert _found(given_gpus=False) is None  # a job given no GPUs runs on the CPU by design
    assert _found(nvml=None) is None  # GPUs that are GRES entries only: the CPU stand-in path
    assert _found(nvml=(0, "535.183.01")) is None
    assert _found(torch_gpus=8) is None


def test_the_error_travels_pickled_and_its_record_beside_the_result(tmp_path):
    record = _found()
    error = pickle.loads(pickle.dumps(TorchCannotUseGpus(record)))
    assert error.record == record and str(error) == record.sentence()
    result = tmp_path / "4711_0_result.pkl"
    environment_path(result).write_bytes(pickle.dumps(record))
    assert environment_path(result).name == "4711_0_environment.pkl"
    assert task_files.left_environment(result) == record
    assert task_files.left_environment(tmp_path / "4712_0_result.pkl") is None

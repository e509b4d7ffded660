"""A soak run on its own still says what it soaked: the GPU model its GPUs gave (and the profile's
beside it where they differ), the driver and CUDA version from the soak's start records, and no
share of the asked length for a soak that ran its length (report/model.py, report/soak.py), on the
real 5-minute H200 soak of docs/samples."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from pytest_gpucluster.report import model, soak

SAMPLE = Path(__file__).resolve().parents[2] / "docs" / "samples" / "results-soak-h200-dip.json"


def doc() -> dict[str, Any]:
    return json.loads(SAMPLE.read_text(encoding="utf-8"))


def test_the_gpu_summary_names_the_model_the_gpus_gave_and_the_profiles_beside_it():
    assert model.gpu_summary(doc()) == "1 node × 1 NVIDIA H200 = 1 GPU (the profile declares H100)"
    same = doc()
    same["cluster"]["gpu_model"] = "NVIDIA H200"
    assert model.gpu_summary(same) == "1 node × 1 NVIDIA H200 = 1 GPU"


def test_driver_and_cuda_come_from_the_soaks_start_records_where_nothing_else_recorded_them():
    before = dict(model.versions(doc()))
    assert before["NVIDIA driver"] == "not recorded" and before["CUDA"] == "not recorded"
    later = doc()
    later["soak"]["nodes"]["node1"]["gpus"]["gpu0"].update(driver="570.86.15", cuda="12.8")
    after = dict(model.versions(later))
    assert after["NVIDIA driver"] == "570.86.15" and after["CUDA"] == "12.8"


def test_a_soak_that_ran_its_length_shows_no_share_of_the_asked_length():
    section = doc()["soak"]
    (row,) = soak.node_rows(section, doc(), limit=16)
    assert row.ended == "ran its length" and row.soaked == "4 min of 5 min"
    cut = copy.deepcopy(section)
    cut["nodes"]["node1"]["ended"] = "interrupted"
    (row,) = soak.node_rows(cut, doc(), limit=16)
    assert row.soaked == "4 min of 5 min (94 %)"

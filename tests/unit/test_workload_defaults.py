"""The workloads' own configs mirror the profile's settings (field names and defaults), so a
benchmark run without a profile measures the same thing as the acceptance suite."""

from __future__ import annotations

from dataclasses import MISSING, fields

import pytest

from pytest_gpucluster.profile import ComputeSettings, TrainingSettings
from pytest_gpucluster.workloads.compute import ComputeConfig
from pytest_gpucluster.workloads.training import TrainConfig


@pytest.mark.parametrize(("settings", "config"), [(TrainingSettings, TrainConfig), (ComputeSettings, ComputeConfig)])
def test_shared_fields_have_the_same_defaults(settings, config):
    ours = {f.name: f.default for f in fields(config) if f.default is not MISSING}
    shared = [f for f in fields(settings) if f.name in ours]
    assert len(shared) >= 5
    assert {f.name: f.default for f in shared} == {f.name: ours[f.name] for f in shared}

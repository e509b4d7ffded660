"""thresholds.toml → frozen dataclasses: cluster profiles, threshold sets and the metric catalogue.

``load(path)`` reads and checks the file once, before any job exists, and returns a ``Config``;
``Config.profile(name)`` and ``Config.thresholds_for(profile)`` give what a run uses.
"""

from __future__ import annotations

from pytest_gpucluster.config.load import Config, load
from pytest_gpucluster.config.metrics import METRICS, NVLS_COLLECTIVES, Metric
from pytest_gpucluster.config.profile import NcclSettings, Profile
from pytest_gpucluster.config.tables import parse_bytes
from pytest_gpucluster.config.thresholds import Threshold, ThresholdSet
from pytest_gpucluster.errors import ConfigError

__all__ = [
    "METRICS",
    "NVLS_COLLECTIVES",
    "Config",
    "ConfigError",
    "Metric",
    "NcclSettings",
    "Profile",
    "Threshold",
    "ThresholdSet",
    "load",
    "parse_bytes",
]

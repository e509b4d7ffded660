"""pytest-gpucluster: acceptance tests for Slurm GPU clusters, as a pytest plugin."""

from __future__ import annotations

__version__ = "0.1.0"

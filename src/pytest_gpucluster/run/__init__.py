"""Executing a run's plan: values measured once and shared, and the jobs the plan starts ahead."""

from pytest_gpucluster.run.runner import Runner, Start

__all__ = ["Runner", "Start"]

"""What a run's jobs are, before any is submitted.

Checks declare the jobs they take their readings from (``JobRequest``: the workload, its
``Shape``, every count of it declared, ``shape.py``, and its scheduling facts, ``jobs.py``); the
planner (``planner.py``) turns the requests of the selected tests and the profile's shape into
the run's plan: which job rides inside another, which light jobs start ahead, which job holding
GPUs goes ahead. Pure: no pytest, no Slurm, no test names.
"""

from pytest_gpucluster.plan.jobs import JobRequest
from pytest_gpucluster.plan.planner import Facts, Plan, PlannedJob, Use, last_order, make_plan
from pytest_gpucluster.plan.shape import Shape

__all__ = ["Facts", "JobRequest", "Plan", "PlannedJob", "Shape", "Use", "last_order", "make_plan"]

"""GPU isolation: inside a Slurm job the task sees exactly the GPUs it was
allotted, concurrent jobs on one node get disjoint GPUs, --gpus-per-task=1 gives each task its
own GPU, and nothing foreign holds memory on them. Without device cgroups: a warning, not a pass.
Two jobs per run on nodes of 4 GPUs or more: they run at once, each holding half of every node's
GPUs; the first as one task per node, the second as one task per GPU (--gpus-per-task=1), so the
pair also serves the one-GPU-per-task test. With 2 or 3 GPUs per node that test has a job of its
own. The pair measures no speed: it starts ahead, beside the other light jobs, unless the node probe
has an early job of its own (it holds every GPU too)."""

from __future__ import annotations

import pytest

from pytest_gpucluster.checks import isolation as isolation_checks
from pytest_gpucluster.plan import jobs

pytestmark = pytest.mark.slurm


# The pair may start ahead only as the run's one early job that holds GPUs (plan/planner.py): beside
# another, one job of the pair could be queued behind it while the other waits for it at the hold.
PAIR = pytest.mark.uses(jobs.ISOLATION_PAIR)


@pytest.fixture
def half_node_views(cluster, measured):
    """Every node, jobs holding half of the node's GPUs (so there are GPUs they must not see):
    ``(GPUs per job, [(view, GPUs the task asked for)])`` for the two jobs of the concurrency
    test, which between them cover every GPU of every node; on one-GPU nodes, a job of its own
    with that GPU."""
    if cluster.gpus_per_node >= 2:
        half, first, second, per_task = measured(jobs.ISOLATION_PAIR)
        return half, [(v, half) for v in first] + [(v, 1 if per_task else half) for v in second]
    return 1, [(v, 1) for v in measured(jobs.ISOLATION_VIEW)]


@pytest.mark.gpu(2, gres_only=True)
@PAIR
def test_job_sees_exactly_its_gpus(half_node_views, profile, judge):
    holds, views = half_node_views
    found = isolation_checks.view_findings(views, device_cgroups=profile.device_cgroups, job_holds=holds)
    judge.findings(found, f"tasks of jobs holding {holds} GPU(s) per node do not see exactly what they were given")


@pytest.mark.gpu
@PAIR
@pytest.mark.uses(jobs.ISOLATION_VIEW)
def test_no_foreign_process_on_the_jobs_gpus(half_node_views, judge):
    _, views = half_node_views
    found = [f for v, _ in views for f in isolation_checks.foreign_process_findings(v)]
    judge.findings(found, "foreign processes hold the job's GPUs")


@pytest.mark.gpu(2, gres_only=True)
@PAIR
def test_concurrent_jobs_get_disjoint_gpus(measured, judge):
    _, first, second, _ = measured(jobs.ISOLATION_PAIR)
    judge.findings(isolation_checks.disjoint_findings(first, second), "two jobs running at once share GPUs")


@pytest.mark.gpu(2, gres_only=True)
@PAIR
@pytest.mark.uses(jobs.ISOLATION_PER_TASK)
def test_gpus_per_task_gives_each_task_its_own_gpu(measured, judge):
    n, views = measured(jobs.ISOLATION_PER_TASK)
    judge.findings(
        isolation_checks.per_task_findings(views), f"{n} tasks with --gpus-per-task=1 do not each get one GPU"
    )

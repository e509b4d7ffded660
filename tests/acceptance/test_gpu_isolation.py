"""GPU isolation: inside a Slurm job the task sees exactly the GPUs it was
allotted, concurrent jobs on one node get disjoint GPUs, --gpus-per-task=1 gives each task its
own GPU, and nothing foreign holds memory on them. Without device cgroups: a warning, not a pass.
Two jobs per run on nodes of 4 GPUs or more: they run at once, each holding half of every node's
GPUs; the first as one task per node, the second as one task per GPU (--gpus-per-task=1), so the
pair also serves the one-GPU-per-task test. With 2 or 3 GPUs per node that test has a job of its
own. The pair measures no speed: it starts ahead, beside the other light jobs, unless the node probe
has an early job of its own (it holds every GPU too)."""

from __future__ import annotations

import tempfile
import warnings

import pytest

from pytest_gpucluster.checks import isolation as isolation_checks
from pytest_gpucluster.outcomes import ThresholdWarning
from pytest_gpucluster.plan import jobs
from pytest_gpucluster.workloads import isolation

pytestmark = pytest.mark.slurm


def _warn(lines):
    for line in lines:
        warnings.warn(ThresholdWarning(line), stacklevel=2)


def _pair(gpucluster):
    """Two jobs at once, each holding half of every node's GPUs and waiting (bounded) until the
    other runs too: (GPUs each job holds per node, first job's views, second job's views, whether
    the second ran one task per GPU), once per run."""
    half = gpucluster.gpus_per_node // 2
    per_task = half >= 2
    first = gpucluster.spec("isolation-pair", all_nodes=True, gpus_per_node=half)
    second = (
        gpucluster.spec("isolation-pair-per-task", all_nodes=True, tasks_per_node=half, gpus_per_task=1)
        if per_task
        else first
    )
    real = gpucluster.profile.gpus_are_real
    short = gpucluster.short_of_gpus(2 * half)
    if short:
        # Each job would start, and wait at its hold for the other until queue_timeout_s.
        pytest.fail(
            f"{short}; the profile's {gpucluster.gpus_per_node} GPUs per node make a pair of jobs of {half} "
            "GPUs each that cannot run at once there: not submitted. Fix gpus_per_node or the nodes' Gres.",
            pytrace=False,
        )

    def produce():
        with tempfile.TemporaryDirectory(prefix="isolation-", dir=gpucluster.job_root) as root:

            def submit_pair():
                hold = tempfile.mkdtemp(dir=root)  # each try its own: a cancelled job's mark says nothing
                return [
                    gpucluster.submit(isolation.gpu_view, first, real=real, hold_dir=hold, hold_as="a", hold_for="b"),
                    gpucluster.submit(isolation.gpu_view, second, real=real, hold_dir=hold, hold_as="b", hold_for="a"),
                ]

            results_a, results_b = gpucluster.run_together(submit_pair)
            return [r.value for r in results_a], [r.value for r in results_b]

    return (half, *gpucluster.once(("isolation-pair",), produce), per_task)


# The pair may start ahead only as the run's one early job that holds GPUs (plan/planner.py): beside
# another, one job of the pair could be queued behind it while the other waits for it at the hold.
PAIR = pytest.mark.uses(jobs.ISOLATION_PAIR, start=_pair)


@pytest.fixture
def half_node_views(gpucluster):
    """Every node, jobs holding half of the node's GPUs (so there are GPUs they must not see):
    ``(GPUs per job, [(view, GPUs the task asked for)])`` for the two jobs of the concurrency
    test, which between them cover every GPU of every node; on one-GPU nodes, a job of its own
    with that GPU."""
    if gpucluster.gpus_per_node >= 2:
        half, first, second, per_task = _pair(gpucluster)
        return half, [(v, half) for v in first] + [(v, 1 if per_task else half) for v in second]
    spec = gpucluster.spec("isolation-view", all_nodes=True, gpus_per_node=1)
    real = gpucluster.profile.gpus_are_real

    def produce():
        return [r.value for r in gpucluster.run(isolation.gpu_view, spec, real=real)]

    return 1, [(v, 1) for v in gpucluster.once(("isolation-view",), produce)]


@pytest.mark.gpu(2, gres_only=True)
@PAIR
def test_job_sees_exactly_its_gpus(half_node_views, profile, judge):
    holds, views = half_node_views
    found = [
        isolation_checks.view_problems(v, asked, device_cgroups=profile.device_cgroups, job_holds=holds)
        for v, asked in views
    ]
    _warn([w for _, ws in found for w in ws])
    judge.problems(
        [p for ps, _ in found for p in ps],
        f"tasks of jobs holding {holds} GPU(s) per node do not see exactly what they were given",
    )


@pytest.mark.gpu
@PAIR
@pytest.mark.uses(jobs.ISOLATION_VIEW)
def test_no_foreign_process_on_the_jobs_gpus(half_node_views, judge):
    _, views = half_node_views
    problems = [p for v, _ in views for p in isolation_checks.foreign_process_problems(v)]
    judge.problems(problems, "foreign processes hold the job's GPUs")


@pytest.mark.gpu(2, gres_only=True)
@PAIR
def test_concurrent_jobs_get_disjoint_gpus(gpucluster, judge):
    _, first, second, _ = _pair(gpucluster)
    judge.problems(isolation_checks.disjoint_problems(first, second), "two jobs running at once share GPUs")


@pytest.mark.gpu(2, gres_only=True)
@PAIR
@pytest.mark.uses(jobs.ISOLATION_PER_TASK)
def test_gpus_per_task_gives_each_task_its_own_gpu(gpucluster, judge):
    if gpucluster.gpus_per_node >= 4:
        n, _, views, _ = _pair(gpucluster)
    else:
        n = gpucluster.gpus_per_node
        spec = gpucluster.spec("isolation-per-task", all_nodes=True, tasks_per_node=n, gpus_per_task=1)
        views = [r.value for r in gpucluster.run(isolation.gpu_view, spec, real=gpucluster.profile.gpus_are_real)]
    judge.problems(
        isolation_checks.per_task_problems(views), f"{n} tasks with --gpus-per-task=1 do not each get one GPU"
    )

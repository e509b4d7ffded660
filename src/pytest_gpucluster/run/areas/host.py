"""The host checks' job (``jobs.HOST_CHECKS``): one task per node; the nodes that answered are
judged on their own reports, a lost node by its own tests."""

from __future__ import annotations

from typing import NamedTuple

from pytest_gpucluster.plan import jobs
from pytest_gpucluster.run.context import JobContext
from pytest_gpucluster.run.produce import answered, produces, run_declared
from pytest_gpucluster.workloads.host_checks import HostReport


class Hosted(NamedTuple):
    """node → its report, and the job's id."""

    reports: dict[str, HostReport]
    job_id: str


@produces(jobs.HOST_CHECKS)
def hosted(ctx: JobContext) -> Hosted:
    """The run's host job, once per run."""

    def produce() -> Hosted:
        results = answered(lambda: run_declared(ctx, jobs.HOST_CHECKS))
        return Hosted({r.value.node: r.value for r in results}, results[0].job_id if results else "")

    return ctx.once(jobs.HOST_CHECKS.key, produce, light=jobs.HOST_CHECKS.light)

"""What a collected test declares, read from its markers and its module: whether it is an
acceptance check, what it needs of the cluster, the jobs it uses (with the test parameters their
producers take) and whether a skip already decides it. The plan of a run is made from them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from pytest_gpucluster.errors import GpuClusterError
from pytest_gpucluster.plan import Facts, JobRequest, Plan, Use, make_plan
from pytest_gpucluster.plan.selection import NEED_MARKERS, Needs
from pytest_gpucluster.run import Start, produce
from pytest_gpucluster.run.cluster import Cluster
from pytest_gpucluster.run.context import JobContext

DECLARED_NOT_APPLICABLE = "gpucluster_not_applicable"


def is_check(item: pytest.Item) -> bool:
    """Whether ``item`` is an acceptance check: it judges, uses the cluster, or states a need."""
    return _is_check(getattr(item, "fixturenames", ()), item)


def defines_check(metafunc: pytest.Metafunc) -> bool:
    """Whether the test function ``metafunc`` parametrises is an acceptance check (``is_check``),
    asked before its items exist: only checks take the plugin's ``node`` parameter."""
    return _is_check(metafunc.fixturenames, metafunc.definition)


def _is_check(fixturenames: Any, node: pytest.Item) -> bool:
    if {"judge", "gpucluster", "cluster", "measured"} & set(fixturenames):
        return True
    return any(node.get_closest_marker(m) is not None for m in NEED_MARKERS if m != "slow")


def needs_of(item: pytest.Item) -> Needs:
    """A check's needs, from its markers (``plugin.MARKERS``)."""
    gpu = item.get_closest_marker("gpu")
    count = 0
    if gpu is not None:
        count = int(gpu.args[0]) if gpu.args else int(gpu.kwargs.get("count", 1))
    return Needs(
        nodeid=item.nodeid,
        across_nodes=item.get_closest_marker("across_nodes") is not None,
        gpus=count,
        gres_only=bool(gpu.kwargs.get("gres_only", False)) if gpu is not None else False,
        slurm=item.get_closest_marker("slurm") is not None,
        infiniband=item.get_closest_marker("infiniband") is not None,
        accounting=item.get_closest_marker("accounting") is not None,
        slow=item.get_closest_marker("slow") is not None,
        soak=item.get_closest_marker("soak") is not None,
    )


def requests_of(item: pytest.Item) -> list[JobRequest]:
    """The job requests ``item``'s ``uses`` markers declare."""
    return [r for mark in item.iter_markers("uses") for r in mark.args if isinstance(r, JobRequest)]


def starter(request: JobRequest) -> Callable[..., Any]:
    """The early start of ``request``: its value produced with the job context and parameters."""

    def start(ctx: JobContext, **params: Any) -> Any:
        return produce.value(ctx, request, **params)

    return start


def skipped(item: pytest.Item) -> bool:
    """True when a skip marker (or a skipif whose conditions are plain booleans, all true)
    already decides that ``item`` will not run."""
    if item.get_closest_marker("skip") is not None:
        return True
    return any(m.args and all(a is True for a in m.args) for m in item.iter_markers("skipif"))


def uses_of(item: pytest.Item) -> list[Use]:
    """``item``'s uses of job requests, each light one with the test parameters its producer
    takes (none when the test does not supply them all: the job then starts when its test runs)."""
    params = dict(getattr(getattr(item, "callspec", None), "params", {}))
    uses = []
    for mark in item.iter_markers("uses"):
        for request in mark.args:
            if not isinstance(request, JobRequest):
                raise GpuClusterError(
                    f"{item.nodeid}: @pytest.mark.uses takes JobRequest objects "
                    f"(pytest_gpucluster.plan.jobs), not {request!r}"
                )
            # Parameters matter to the plan only for a job it may start ahead (a light one): each
            # set is one start. A measuring job's producer may take the test's node and collective
            # to judge one of them, yet runs one job for all.
            wanted = produce.params_of(request) if request.light else []
            given = tuple((arg, params[arg]) for arg in wanted if arg in params)
            uses.append(Use(request, item.nodeid, given if len(given) == len(wanted) else ()))
    return uses


def plan_of(items: list[pytest.Item], known: Facts) -> tuple[Plan, list[Start]]:
    """The plan for the runnable ``items`` (``plan.make_plan``) from the requests their ``uses``
    markers declare, and the early start of each job the plan starts ahead: its producer
    (``run.produce``) with the test parameters it takes."""
    uses = [use for item in items for use in uses_of(item)]
    plan = make_plan(uses, known)
    by_key = {u.request.key: u.request for u in uses}
    early = [
        Start(job.key, starter(by_key[job.key]), dict(p))
        for job in plan.ahead
        if job.key in by_key
        for p in job.params or ((),)
        if len(p) == len(produce.params_of(by_key[job.key]))
    ]
    return plan, early


def declared_not_applicable(item: pytest.Item, cluster: Cluster) -> str | None:
    """Why ``item``'s own module declares it not applicable to this profile's shape, or None.

    A need the markers cannot state (one GPU per node rules out an intra-node collective, while
    nodes without GPUs still run one on CPU ranks) is declared by a module-level function
    ``gpucluster_not_applicable(cluster, name)`` of the test file: the run's view of the cluster
    (``run.cluster.Cluster``) and the test's function name in, a reason or None out. It is asked at
    collection, before any job exists."""
    declared = getattr(getattr(item, "module", None), DECLARED_NOT_APPLICABLE, None)
    if not callable(declared):
        return None
    why = declared(cluster, getattr(item, "originalname", item.name))
    return str(why) if why else None

"""Runs a declared job and hands its value to the checks that read it.

Every request of ``plan.jobs`` is executed by its declaration: the job's shape resolved against
the profile (``spec_of``; no count is set at run time), its workload run on the tested nodes, its
value measured once per run (``JobContext.once``) and shared by every test that reads it. An area
whose value needs more than one workload call (a retry of a slow collective, rounds of node pairs,
two jobs that must run at once, a fallback job) registers a producer for its request
(``@produces``) in a module of ``run/areas/`` named after the area; the producer receives the
context and the test's parameters it names in its signature (``node``, ``op``, ...).

The same producer is what the runner calls when the plan starts a job ahead of the first test.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any, TypeVar, cast

from pytest_gpucluster.errors import DeclarationError, NodeLostError
from pytest_gpucluster.launch import JobSpec, TaskResult
from pytest_gpucluster.plan import JobRequest
from pytest_gpucluster.plan.shape import EACH, EVERY
from pytest_gpucluster.run.context import JobContext

Producer = Callable[..., Any]

_PRODUCERS: dict[str, Producer] = {}


def produces(request: JobRequest) -> Callable[[Producer], Producer]:
    """Register the decorated function as ``request``'s producer: ``fn(ctx, **params)``."""

    def register(fn: Producer) -> Producer:
        if request.key in _PRODUCERS and _PRODUCERS[request.key] is not fn:
            raise DeclarationError(f"job request {request.key!r} has two producers: {_PRODUCERS[request.key]} and {fn}")
        _PRODUCERS[request.key] = fn
        return fn

    return register


def producer_of(request: JobRequest) -> Producer | None:
    """``request``'s registered producer, or None: it then runs as declared (``plain``). The
    suite's producers are registered when ``run.areas`` is imported (the session does)."""
    return _PRODUCERS.get(request.key)


def params_of(request: JobRequest) -> list[str]:
    """The test parameters ``request``'s producer takes: its keyword arguments after the context."""
    producer = producer_of(request)
    if producer is None:
        return []
    return [
        name
        for name, p in list(inspect.signature(producer).parameters.items())[1:]
        if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)
    ]


def taken(request: JobRequest, params: Mapping[str, Any]) -> dict[str, Any]:
    """Of a test's parameters, those ``request``'s producer takes."""
    names = params_of(request)
    return {k: v for k, v in params.items() if k in names}


def value(ctx: JobContext, request: JobRequest, **params: Any) -> Any:
    """The value of ``request`` for these parameters: produced on first use, shared after."""
    producer = producer_of(request)
    if producer is None:
        return plain(ctx, request)
    return producer(ctx, **params)


def spec_of(
    ctx: JobContext,
    request: JobRequest,
    *,
    name: str | None = None,
    env: Mapping[str, str] | None = None,
    nodelist: tuple[str, ...] | None = None,
    timeout_min: int | None = None,
    **counts: Any,
) -> JobSpec:
    """``request``'s job on this run's nodes: every count from its declared shape, resolved for the
    profile and its GPUs per node (``JobRequest.resolve``). The area sets only what the shape leaves
    to it: the job's ``name`` (the request's key by default), ``env`` over the declared environment
    (NCCL's log files, its algorithm), the ``nodelist`` of a job per node or of a retry on one node,
    and ``timeout_min``. A count given here raises DeclarationError: another shape is another
    request (``plan/jobs.py``)."""
    if counts:
        fields = ", ".join(sorted(counts))
        verb = "comes" if len(counts) == 1 else "come"
        raise DeclarationError(
            f"job request {request.key!r}: {fields} {verb} from its declared shape ({request.shape.describe()}); "
            "a job of another shape is another request in plan/jobs.py"
        )
    shape = request.resolve(ctx.profile, ctx.gpus_per_node)
    args: dict[str, Any] = {}
    if nodelist is not None:
        args["nodelist"] = nodelist  # the job's nodes are these, whatever the declared count
    elif shape.nodes == EVERY:
        args["all_nodes"] = True
    elif shape.nodes != EACH:
        args["nodes"] = int(shape.nodes)
    env = {**dict(request.env), **(env or {})}
    return ctx.spec(
        name or request.key,
        tasks_per_node=shape.tasks_per_node,
        gpus_per_node=shape.gpus_per_node,
        gpus_per_task=shape.gpus_per_task,
        exclusive=shape.exclusive,
        timeout_min=timeout_min,
        env=env or None,
        **args,
    )


def run_declared(ctx: JobContext, request: JobRequest, /, **spec: Any) -> list[TaskResult[Any]]:
    """Run ``request``'s workload on its declared shape with its declared arguments; ``spec`` sets
    what the shape leaves to the area (``spec_of``: a timeout, a node list). One result per task."""
    if request.workload is None:
        raise DeclarationError(
            f"job request {request.key!r} declares no workload and no producer registers for it (run/areas/)"
        )
    args = request.args(ctx.profile, ctx.gpus_per_node) if request.args is not None else {}
    return ctx.run(request.workload, spec_of(ctx, request, **spec), **args)


T = TypeVar("T")


def answered(run: Callable[[], list[TaskResult[T]]]) -> list[TaskResult[T]]:
    """``run``'s results; where nodes were lost under the job, those of the nodes that answered
    (``NodeLostError.answered``), so each other node is judged on its own readings and the lost
    nodes are named by their own tests.

    Where no node answered (the job was cancelled while PENDING, its node lost before it
    started), ``run`` once more: the run has learned the lost nodes, so a job asking for every
    tested node is submitted to the others, and one pinned to a lost node is refused without a
    submission. A partner's loss then costs the healthy nodes one job start, not their readings.
    Raises where still no node answered: the first evidence, unless the second try lost
    another node."""
    try:
        return run()
    except NodeLostError as exc:
        if exc.answered:
            return cast(list[TaskResult[T]], exc.answered)
        first = exc
    try:
        return run()
    except NodeLostError as again:
        if again.answered:
            return cast(list[TaskResult[T]], again.answered)
        raise (again if again.lost.keys() - first.lost.keys() else first) from None


def plain(ctx: JobContext, request: JobRequest) -> list[TaskResult[Any]]:
    """A request without a producer of its own: its declaration run once (``run_declared``)."""
    return ctx.once(  # type: ignore[no-any-return]
        request.key, lambda: run_declared(ctx, request), light=request.light
    )

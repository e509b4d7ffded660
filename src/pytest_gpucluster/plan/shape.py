"""A declared job's shape in the profile's terms, and its counts for one profile.

Every count a job runs with (nodes, tasks per node, GPUs per node, GPUs per task) is part of its
declaration: a number, one of the words below, or a function of the profile and the GPUs per node
declared next to the requests (``plan/jobs.py``), so that the job a check reads is the job its
request says. ``Shape.resolve`` turns a shape into plain numbers; ``run.produce.spec_of`` makes
them a job of the run.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from pytest_gpucluster.config import Profile
from pytest_gpucluster.plan.facts import ranks_per_node

EVERY = "every"  # one job over every tested node
EACH = "each"  # one job per tested node, all submitted at once
PER_GPU = "per_gpu"  # one task per GPU of the node (at least one)
RANKS = "ranks"  # the ranks of a collective: one per GPU, two CPU ranks where the GPUs are not real
ALL = "all"  # every GPU of the node
HALF = "half"  # half of the node's GPUs, rounded down (as tasks: one per GPU of that half)
REAL_GPUS = "real_gpus"  # every GPU of the node where the profile's GPUs are real; none for CPU ranks
PER_TASK = "per_task"  # a GPU for each task where the GPUs are real and suffice; none for CPU ranks

Count = Callable[[Profile, int], int]
"""A count decided by the profile and the GPUs per node; its docstring's first line names it."""

_WORDS = {
    EVERY: "every node",
    EACH: "a job per node",
    PER_GPU: "a task per GPU",
    RANKS: "a rank per GPU",
    ALL: "all GPUs",
    HALF: "half the GPUs",
    REAL_GPUS: "all GPUs if real",
    PER_TASK: "a GPU per task if real",
}
_TASKS = (PER_GPU, RANKS, HALF)
_GPUS = (ALL, HALF, REAL_GPUS, PER_TASK)


@dataclass(frozen=True)
class Resolved:
    """A shape's counts on nodes of one profile: ``nodes`` stays ``EVERY`` or ``EACH`` (the run's
    tested nodes decide how many), else a number."""

    nodes: str | int
    tasks_per_node: int
    gpus_per_node: int
    gpus_per_task: int | None
    exclusive: bool


@dataclass(frozen=True)
class Shape:
    """Where a declared job runs and on what, in the profile's terms.

    ``nodes``: ``EVERY``, ``EACH`` or a number. ``tasks_per_node``: a number, ``PER_GPU``,
    ``RANKS``, ``HALF`` or a ``Count``. ``gpus_per_node``: ``ALL``, ``HALF``, ``REAL_GPUS``,
    ``PER_TASK``, a number (at most the node's GPUs; 0: the job asks for none) or a ``Count``.
    ``gpus_per_task``: Slurm's ``--gpus-per-task``, which Slurm then takes over the GPUs per node.
    ``exclusive``: the job has its nodes to itself whatever the profile says."""

    nodes: str | int = EVERY
    tasks_per_node: str | int | Count = 1
    gpus_per_node: str | int | Count = ALL
    gpus_per_task: int | None = None
    exclusive: bool = False

    def __post_init__(self) -> None:
        for name, value, words in (
            ("nodes", self.nodes, (EVERY, EACH)),
            ("tasks_per_node", self.tasks_per_node, _TASKS),
            ("gpus_per_node", self.gpus_per_node, _GPUS),
        ):
            if isinstance(value, str) and value not in words:
                raise ValueError(f"Shape({name}={value!r}): one of {', '.join(map(repr, words))}, a number or a Count")

    def resolve(self, profile: Profile, gpus_per_node: int) -> Resolved:
        """The counts on nodes of ``gpus_per_node`` GPUs of ``profile``."""
        tasks = _count(self.tasks_per_node, profile, gpus_per_node, tasks=0)
        gpus = _count(self.gpus_per_node, profile, gpus_per_node, tasks=tasks)
        if isinstance(self.gpus_per_node, int):
            gpus = min(gpus, gpus_per_node)
        return Resolved(self.nodes, tasks, gpus, self.gpus_per_task, self.exclusive)

    def describe(self) -> str:
        """The shape in words, as the dry run and the docs say it."""
        nodes = _WORDS.get(str(self.nodes), f"{self.nodes} node(s)")
        tasks = _say(self.tasks_per_node, "task(s)")
        gpus = _say(self.gpus_per_node, "GPU(s)")
        per_task = f", {self.gpus_per_task} GPU(s) per task" if self.gpus_per_task else ""
        return f"{nodes}, {tasks} per node, {gpus}{per_task}" + (", exclusive" if self.exclusive else "")


def _count(value: str | int | Count, profile: Profile, gpus: int, *, tasks: int) -> int:
    real = profile.gpus_are_real and gpus > 0
    if isinstance(value, int):
        return value
    if callable(value):
        return value(profile, gpus)
    return {
        PER_GPU: max(1, gpus),
        RANKS: ranks_per_node(profile, gpus),
        ALL: gpus,
        HALF: gpus // 2,
        REAL_GPUS: gpus if real else 0,
        PER_TASK: tasks if real and gpus >= tasks else 0,
    }[value]


def _say(value: str | int | Count, unit: str) -> str:
    if isinstance(value, int):
        return f"{value} {unit}"
    if callable(value):
        return (value.__doc__ or value.__name__).strip().splitlines()[0].rstrip(".")
    return _WORDS[value]

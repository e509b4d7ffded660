"""What a check may know of the cluster: the tested nodes and their GPUs, the profile, the
thresholds in force and the run's plan. Checks read job values through the ``measured`` fixture
and judge them; they submit nothing, so this object has no way to."""

from __future__ import annotations

from pytest_gpucluster.config import Profile, ThresholdSet
from pytest_gpucluster.plan import Plan
from pytest_gpucluster.run.context import JobContext
from pytest_gpucluster.slurm import Slurm
from pytest_gpucluster.workloads.xid import XidWatch


class Cluster:
    """A read-only view of the run for checks, over the job-running context."""

    def __init__(self, ctx: JobContext) -> None:
        self._ctx = ctx

    @property
    def profile(self) -> Profile:
        """The cluster profile chosen with --cluster."""
        return self._ctx.profile

    @property
    def thresholds(self) -> ThresholdSet:
        """The thresholds in force (the GPU model's set laid over default)."""
        return self._ctx.thresholds

    @property
    def nodes(self) -> tuple[str, ...]:
        """The tested nodes."""
        return self._ctx.nodes

    @property
    def live_nodes(self) -> tuple[str, ...]:
        """The tested nodes less those lost during the run."""
        return self._ctx.live_nodes

    @property
    def candidates(self) -> tuple[str, ...]:
        """The nodes of the partition the run may test where the profile narrows them (its
        reservation's, with its constraint's features); empty: the whole partition."""
        return self._ctx.node_set.candidates

    @property
    def reserved(self) -> frozenset[str]:
        """The nodes of the profile's reservation: there MAINTENANCE is no fault."""
        return self._ctx.node_set.reserved

    @property
    def slurm(self) -> Slurm:
        """The run's client of Slurm, for the checks that ask Slurm itself about its health (no
        job): what it learns (an outage, the node-listing command) is the run's."""
        return self._ctx.slurm

    @property
    def gpus_per_node(self) -> int:
        return self._ctx.gpus_per_node

    @property
    def gpu_model(self) -> str | None:
        return self._ctx.gpu_model

    @property
    def plan(self) -> Plan:
        """The run's jobs: which ride in another, which start ahead (empty before the run starts)."""
        return self._ctx.plan

    @property
    def is_xdist_worker(self) -> bool:
        """Another process controls the run (pytest-xdist): this one sees part of the selection."""
        return self._ctx.is_xdist_worker

    @property
    def started_epoch(self) -> float:
        """When the run started (epoch seconds): what a node logged before is older than the run."""
        return self._ctx.started_epoch

    @property
    def xid_watches(self) -> tuple[XidWatch, ...]:
        """What every task of the run's jobs saw of NVML's Xid events so far (``launch/node.py``);
        none before the first job."""
        launched = self._ctx.launched
        return tuple(launched.xid_watches.values()) if launched is not None else ()

    def say(self, line: str) -> None:
        """One live ``[gpucluster]`` line."""
        self._ctx.say(line)

"""perftest's ib_write_bw between neighbour node pairs: one job over every tested node, no GPU,
each pair writing both ways over every InfiniBand port active on both nodes (the node probe's
reading); none is submitted when the profile names no path and the node probe found ib_write_bw
on no node's PATH."""

from __future__ import annotations

from typing import Any

from pytest_gpucluster.checks import ib_write_bw as judging
from pytest_gpucluster.checks import probe as probe_parts
from pytest_gpucluster.errors import GpuClusterError
from pytest_gpucluster.plan import jobs
from pytest_gpucluster.run.areas import probe
from pytest_gpucluster.run.context import JobContext
from pytest_gpucluster.run.produce import produces, spec_of
from pytest_gpucluster.workloads.ib_write_bw import NodeWrites, run_pairs

Ports = dict[str, list[tuple[str, str]]]  # node → its active (HCA, port)
PairWrites = tuple[Ports, judging.PairPlan, dict[str, NodeWrites], Any]  # ..., node → writes, job id


def _ports(ctx: JobContext) -> Ports:
    """node → its active InfiniBand ports, from the node probe (or a job of their own)."""
    found = probe_parts.good(probe.infiniband(ctx))
    return {node: judging.active_ports(r, ctx.profile.ib_link_layer) for node, r in found.items()}


@produces(jobs.IB_WRITE_BW)
def pair_writes(ctx: JobContext) -> PairWrites:
    """(ports, plan, node → NodeWrites, job id) from one job over every tested node, no GPU."""
    p = ctx.profile

    def produce() -> PairWrites:
        try:
            ports = _ports(ctx)
        except GpuClusterError as exc:
            raise GpuClusterError(f"the InfiniBand ports to pair could not be read: {exc}") from exc
        plan = judging.plan_steps(judging.pairs_for(ctx.live_nodes), ports)
        if not plan.steps:
            return ports, plan, {}, None
        if p.ib_write_bw_path is None and probe.absent_everywhere(ctx, "ib_write_bw"):
            why = "not on PATH (the node probe's reading)"
            return ports, plan, {n: NodeWrites(n, False, why) for n in ctx.live_nodes}, None
        wait = float(p.ib_write_bw_timeout_s)
        minutes = int(plan.longest * (2 * wait + p.ib_write_bw_timeout_s) // 60) + 5
        spec = spec_of(ctx, jobs.IB_WRITE_BW, timeout_min=minutes)
        results = ctx.run(
            run_pairs,
            spec,
            steps=plan.steps,
            path=p.ib_write_bw_path,
            timeout_s=p.ib_write_bw_timeout_s,
            connect_wait_s=wait,
        )
        return ports, plan, {r.value.node: r.value for r in results if r.value}, results[0].job_id

    return ctx.once(jobs.IB_WRITE_BW.key, produce)

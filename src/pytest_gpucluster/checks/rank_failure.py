"""Rank-failure propagation, on the login node: the job's shape and time limit, and the
teardown time read from the stamp files every rank of ``workloads.rank_failure.rank_failure``
wrote, whatever killed whom. A survivor killed before it could say "done" stopped within one
heartbeat of its last one; the upper bound is used so a verdict never flatters the cluster.

What is measured is the cluster's setup (Slurm's KillOnBadExit, the collective library's error
handling), so the teardown and the problems of the injection name the job's nodes together, with
no culprit; a rank that misbehaved on its own (a collective that returned past a dead rank, no
heartbeat) makes its node the culprit.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

from pytest_gpucluster.verdict import Finding, Measurement
from pytest_gpucluster.workloads.rank_failure import EXIT_CODE, HEARTBEAT_S, PG_TIMEOUT_S


def job_shape(available_nodes: int) -> tuple[int, int]:
    """(nodes, tasks per node): one task on each of two nodes, so the failure crosses the
    network; two tasks on one node where only one node is available."""
    return (2, 1) if available_nodes >= 2 else (1, 2)


@dataclass(frozen=True)
class Plan:
    """The rank-failure job: its shape, the GPUs it asks for per node and the ranks' backend."""

    nodes: int
    tasks_per_node: int
    gpus_per_node: int
    backend: str | None  # None: NCCL on GPUs where the job has them (``pick_backend``)
    note: str = ""  # why the ranks run on the CPU, for the measurement's detail


def plan(available_nodes: int, *, gpus_per_node: int, real_gpus: bool) -> Plan:
    """One rank per GPU where the node has a GPU for each rank; otherwise CPU ranks over gloo:
    NCCL refuses two ranks on one GPU ("Duplicate GPU detected"), and a job asking for more GPUs
    than a node has is refused by Slurm. GRES-only GPUs ask for none (the ranks are CPU ones)."""
    nodes, tasks = job_shape(available_nodes)
    if not real_gpus or gpus_per_node <= 0:
        return Plan(nodes, tasks, 0, None)
    if gpus_per_node >= tasks:
        return Plan(nodes, tasks, tasks, None)
    return Plan(
        nodes,
        tasks,
        0,
        "gloo",
        f"{tasks} ranks on the CPU over gloo: the node has {gpus_per_node} GPU and NCCL refuses two ranks on one GPU",
    )


def never_started(job_id: str, why: str, nodes: tuple[str, ...]) -> Finding:
    """The problem of a rank-failure job that ended before it ran: the fault was never injected.
    Of the nodes it was to run on together, no culprit."""
    where = ", ".join(nodes) if nodes else "any node of the partition"
    return Finding.across(
        nodes,
        f"job {job_id} never started ({why}); it was to run on {where}, so no rank failed and no teardown was measured",
    )


def job_minutes(bound_s: float) -> int:
    """A time limit that lets the slowest acceptable teardown finish, then stops a hung job."""
    return max(2, math.ceil((bound_s + PG_TIMEOUT_S + 60.0) / 60.0))


@dataclass(frozen=True)
class Teardown:
    """How long the survivors took to stop after the victim exited, and how they stopped."""

    seconds: float
    where: str
    detail: str
    survivors: tuple[str, ...]  # one line per survivor
    problems: tuple[Finding, ...]  # the injection did not happen as planned
    # When the workload ran (epoch s): the first rank's start to the last stop seen. The job
    # returns no result by design, so this is where its run time comes from.
    ran_from: float = 0.0
    ran_to: float = 0.0
    process_from: float = 0.0  # the first rank's process start (epoch s; 0 when not known)
    nodes: tuple[str, ...] = ()  # the nodes whose ranks wrote stamps

    def measurement(self, job_id: str) -> Measurement:
        """The teardown time, of the job's nodes together (the setup's, no culprit)."""
        metric = "robustness.rank_failure_teardown"
        return Measurement.across(metric, self.seconds, "s", self.nodes, detail=self.detail, job_id=job_id)


def teardown_from_stamps(folder: Path, heartbeat_s: float = HEARTBEAT_S, *, ran_on: tuple[str, ...] = ()) -> Teardown:
    """Read every rank's stamp file: teardown = the last survivor's stop − the victim's exit. A
    survivor killed before it could say "done" stopped within one heartbeat of its last one; the
    upper bound is used so a verdict never flatters the cluster. ``ran_on``: the nodes the job
    was placed on; the findings name them too, so that a node whose ranks wrote no stamp (its
    shared directory is not the shared one, it was lost) is among the job's nodes."""
    ranks = []
    for path in sorted(Path(folder).glob("rank*.json")):
        try:
            ranks.append(json.loads(path.read_text(encoding="utf-8")))
        except (OSError, ValueError):
            continue  # a file being replaced right now; the other ranks still tell the story
    nodes = tuple(dict.fromkeys([*ran_on, *(str(r["node"]) for r in ranks)]))
    problems: list[Finding] = []
    victims = [r for r in ranks if "victim_exit" in r["events"]]
    if not victims:
        joined = ", ".join(f"rank {r['rank']} on {r['node']}: {', '.join(r['events']) or 'no event'}" for r in ranks)
        text = (
            "no rank reached the point of failure (victim_exit); the job failed before the fault "
            f"could be injected. Stamps: {joined or 'none written'}"
        )
        return Teardown(float("nan"), "", "", (), (Finding.across(nodes, text),), nodes=nodes)
    victim = victims[0]
    exit_t = victim["events"]["victim_exit"]
    lines: list[str] = []
    worst, worst_where = 0.0, ""
    for r in sorted(ranks, key=lambda r: r["rank"]):
        if r is victim:
            continue
        ev = r["events"]
        where = f"rank {r['rank']} on {r['node']}"
        if "collective_returned" in ev:
            text = f"{where}: all_reduce completed although rank {victim['rank']} was dead"
            problems.append(Finding.across(nodes, text, culprits=[r["node"]]))
        if "done" in ev:
            stop = ev["done"]
            how = f"noticed ({str(r.get('error') or 'no error text')[:120]})" if "noticed" in ev else "finished"
        elif r.get("heartbeat") is not None:
            stop = r["heartbeat"] + heartbeat_s
            how = (
                "ended without a Python exception (killed by the scheduler, or ended by the NCCL watchdog "
                "after the collective timeout); stopped within one heartbeat of its last"
            )
        else:
            problems.append(Finding.across(nodes, f"{where}: wrote no heartbeat", culprits=[r["node"]]))
            continue
        delay = max(0.0, stop - exit_t)
        lines.append(f"{where}: stopped {delay:.1f} s after the victim's exit, {how}")
        if delay >= worst:
            worst, worst_where = delay, r["node"]
    world = max(int(r.get("world_size", 0)) for r in ranks)
    if len(ranks) < world:
        problems.append(Finding.across(nodes, f"only {len(ranks)} of {world} ranks wrote stamps to {folder}"))
    if not lines:
        problems.append(Finding.across(nodes, "no survivor left a stop time"))
    backend = f" ({victim['backend']} ranks)" if victim.get("backend") else ""
    detail = f"rank {victim['rank']} on {victim['node']} exited with {EXIT_CODE}{backend}; " + "; ".join(lines)
    starts = [float(r["started"]) for r in ranks if r.get("started")]
    stops = [exit_t, *(max([*r["events"].values(), (r.get("heartbeat") or 0.0) + heartbeat_s]) for r in ranks)]
    processes = [float(r["process_started"]) for r in ranks if r.get("process_started")]
    return Teardown(
        round(worst, 2),
        worst_where,
        detail,
        tuple(lines),
        tuple(problems),
        min(starts) if starts else 0.0,
        max(stops),
        min(processes) if processes else 0.0,
        nodes,
    )

"""Slurm health, asked from the login node without a job: the controller
answers, the partition is UP, its nodes are usable and advertise what the profile expects, and
accounting answers."""

from __future__ import annotations

import pytest

from pytest_gpucluster import slurm

pytestmark = [pytest.mark.slurm, pytest.mark.quick]


def test_controller_answers(cluster, judge):
    judge.findings(slurm.controller_findings(cluster.slurm), "slurmctld does not answer")


@pytest.mark.accounting
def test_accounting_answers(cluster, judge):
    judge.findings(slurm.accounting_findings(cluster.slurm), "Slurm accounting (sacct) does not answer")


def test_partition_is_up(cluster, profile, judge):
    judge.findings(slurm.partition_findings(profile.partition, slurm.partitions(cluster.slurm)), "partition not usable")


def test_nodes_are_usable(cluster, profile, judge):
    partition = profile.partition or slurm.default_partition(slurm.partitions(cluster.slurm))
    found = slurm.node_state_findings(
        slurm.nodes(cluster.slurm),
        partition=partition,
        expected=profile.nodes,
        nodelist=profile.nodelist or cluster.candidates,
        reserved=cluster.reserved,
    )
    judge.findings(found, f"nodes of partition {partition!r} are not usable")


def test_nodes_advertise_expected_resources(cluster, profile, judge):
    chosen = profile.nodelist or cluster.candidates
    known = [n for n in slurm.partition_nodes(cluster.slurm, profile.partition) if not chosen or n.name in chosen]
    per_task = profile.cpus_per_task
    found = slurm.node_resource_findings(
        known,
        gpus=profile.gpus_per_node,
        min_cpus=per_task * max(1, cluster.gpus_per_node) if per_task else None,
        min_memory_mb=profile.mem_gb * 1024 if profile.mem_gb else None,
    )
    found += slurm.node_spread(known)  # warnings: a partition may be mixed on purpose
    judge.findings(found, "nodes do not advertise what the profile expects")

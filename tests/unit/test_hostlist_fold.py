"""Node names fold into a hostlist exactly as Slurm folds them: the pairs in
``tests/data/slurm/scontrol-22.05-hostlistsorted.txt`` are Slurm 22.05's own ``scontrol show
hostlistsorted`` answers (unpadded, zero-padded and mixed widths, several prefixes, plain names).
That string is the handover's "rejected" list and its ``sbatch --exclude=`` line."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_gpucluster.slurm import parse_hostlist
from pytest_gpucluster.verdict.ranges import hostlist

RECORDED = Path(__file__).resolve().parents[1] / "data" / "slurm" / "scontrol-22.05-hostlistsorted.txt"
CASES = [tuple(line.split("\t")) for line in RECORDED.read_text().splitlines() if line.strip()]


@pytest.mark.parametrize(("names", "slurm"), CASES, ids=[s[:40] for _, s in CASES])
def test_folds_as_slurm_does(names: str, slurm: str) -> None:
    assert hostlist(names.split(",")) == slurm


@pytest.mark.parametrize(("names", "slurm"), CASES, ids=[s[:40] for _, s in CASES])
def test_the_fold_reads_back_as_the_same_nodes(names: str, slurm: str) -> None:
    assert sorted(parse_hostlist(hostlist(names.split(",")))) == sorted(set(names.split(",")))


def test_unpadded_numbers_of_any_width_make_one_range() -> None:
    assert hostlist([f"worker-{i}" for i in range(64)]) == "worker-[0-63]"
    assert hostlist(["node9", "node10", "node11"]) == "node[9-11]"


def test_padding_comes_only_from_leading_zeros() -> None:
    assert hostlist(["gpu-03", "gpu-11", "gpu-12"]) == "gpu-[03,11-12]"
    assert hostlist(["node1", "node01"]) == "node[1,01]"


def test_duplicates_count_once() -> None:
    assert hostlist(["node2", "node1", "node2"]) == "node[1-2]"

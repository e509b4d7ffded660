"""``[profiles.X.nccl_across]``: the across-node sweeps' own sizes and repetitions, each key taken
from ``[nccl]`` where it is not set, so a profile over a slow network shortens its across-node
sweep without shrinking the intra-node one."""

from __future__ import annotations

import dataclasses
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest

from pytest_gpucluster.checks.nccl import make_check
from pytest_gpucluster.config import NcclSettings, load
from pytest_gpucluster.config.profile import NcclAcross, across_nodes, sweep_settings
from pytest_gpucluster.errors import ConfigError
from pytest_gpucluster.workloads.busbw import SizeResult, SweepResult

MiB, GiB = 2**20, 2**30

BASE = """
[profiles.lab]
executor = "slurm"
partition = "gpu"
nodes = 2
gpus_per_node = 8
gpu_model = "NVIDIA H100 80GB HBM3"

[thresholds.default]
"gpu.temperature" = { unit = "C", fail_above = 85, warn_above = 75 }
"""


def load_text(tmp_path: Path, text: str):
    path = tmp_path / "thresholds.toml"
    path.write_text(textwrap.dedent(text))
    return load(path)


def error_of(tmp_path: Path, text: str) -> str:
    with pytest.raises(ConfigError) as info:
        load_text(tmp_path, text)
    return str(info.value).replace(str(tmp_path / "thresholds.toml"), "T")


def test_the_across_node_table_overrides_what_it_sets_and_takes_the_rest_from_nccl(tmp_path):
    text = (
        BASE
        + """
[profiles.lab.nccl]
max_bytes = "4GiB"
warmup_iters = 3
timeout_s = 300
[profiles.lab.nccl_across]
max_bytes = "64MiB"
judge_from_bytes = "16MiB"
iters = 5
"""
    )
    profile = load_text(tmp_path, text).profile("lab")
    # The intra-node sweep keeps its own sizes.
    assert (profile.nccl.max_bytes, profile.nccl.judge_from_bytes, profile.nccl.iters) == (4 * GiB, GiB, 20)
    across = across_nodes(profile)
    assert (across.min_bytes, across.max_bytes, across.judge_from_bytes) == (MiB, 64 * MiB, 16 * MiB)
    assert (across.warmup_iters, across.iters, across.timeout_s, across.retries) == (3, 5, 300, 1)
    assert across.inter_node_algo == profile.nccl.inter_node_algo


def test_without_the_table_both_sweeps_use_nccl(tmp_path):
    profile = load_text(tmp_path, BASE).profile("lab")
    assert profile.nccl_across == NcclAcross()
    # The same sweep settings; alltoall is judged across nodes besides [nccl] ops.
    assert across_nodes(profile) == dataclasses.replace(profile.nccl, ops=(*profile.nccl.ops, "alltoall"))


def test_extends_merges_the_across_node_table_key_by_key(tmp_path):
    text = (
        BASE
        + """
[profiles.lab.nccl_across]
max_bytes = "64MiB"
judge_from_bytes = "16MiB"
[profiles.lab-short]
extends = "lab"
[profiles.lab-short.nccl_across]
iters = 2
"""
    )
    short = across_nodes(load_text(tmp_path, text).profile("lab-short"))
    assert (short.max_bytes, short.judge_from_bytes, short.iters) == (64 * MiB, 16 * MiB, 2)


@pytest.mark.parametrize(
    ("table", "why"),
    [
        ("max_byte = 1", "profiles.lab.nccl_across.max_byte: unknown key. Perhaps you meant 'max_bytes'?"),
        ('iters = "many"', "profiles.lab.nccl_across.iters: expected an integer, got 'many'."),
        ('max_bytes = "64 parsecs"', "profiles.lab.nccl_across.max_bytes: '64 parsecs' is not a size; write e.g. "),
        (
            'max_bytes = "64MiB"',
            "profiles.lab.nccl_across: need 0 < min_bytes ≤ judge_from_bytes ≤ max_bytes "
            "(min_bytes, judge_from_bytes taken from [nccl]).",
        ),
        (
            "iters = 0",
            "profiles.lab.nccl_across: iters ≥ 1, warmup_iters ≥ 0, retries ≥ 0 and timeout_s ≥ 1 are required.",
        ),
    ],
)
def test_a_bad_across_node_setting_names_its_key(tmp_path, table, why):
    assert error_of(tmp_path, BASE + f"\n[profiles.lab.nccl_across]\n{table}\n").startswith(f"T: {why}")


def _sweep(sizes: list[int]) -> SweepResult:
    rows = tuple(
        SizeResult(size_bytes=n, count=n // 4, in_place=False, time_us=1.0, algbw=1.0, busbw=float(n // MiB), wrong=0)
        for n in sizes
    )
    return SweepResult(
        op="all_reduce",
        nodes=("node1", "node2"),
        n_ranks=4,
        backend="nccl",
        implementation="all_reduce",
        rows=rows,
        warmup_iters=2,
        iters=5,
    )


def test_the_across_node_check_judges_from_its_own_size_and_the_intra_node_one_from_nccl():
    profile = SimpleNamespace(nccl=NcclSettings(), nccl_across=NcclAcross(judge_from_bytes=16 * MiB, retries=0))
    assert sweep_settings(profile, across=True).judge_from_bytes == 16 * MiB
    assert sweep_settings(profile, across=False) == profile.nccl
    sweep = _sweep([4 * MiB, 16 * MiB, 64 * MiB])
    across = make_check(sweep, "nccl.all_reduce.inter_node", None, sweep_settings(profile, across=True)).measurement
    assert across is not None and across.value == 16.0
    assert "min busbw over sizes ≥ 16 MiB" in across.detail
    # The intra-node line is judged from [nccl]'s 1 GiB: this sweep stops below it.
    intra = make_check(sweep, "nccl.all_reduce.intra_node", None, sweep_settings(profile, across=False)).measurement
    assert intra is not None and intra.value == 64.0
    assert "largest size measured (64 MiB < judge_from 1 GiB)" in intra.detail

"""A threshold set is chosen by GPU model and node shape: the GPUs per node the jobs see. A shape
with no set of its own is never judged by another shape's intra-node lines: the check says so."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_gpucluster.config import Profile
from pytest_gpucluster.config.load import load
from pytest_gpucluster.errors import ConfigError, MissingThresholdError

REPO = Path(__file__).resolve().parents[2]
LOCAL = Profile("local", executor="local")


@pytest.fixture(scope="module")
def shipped():
    return load(REPO / "thresholds.toml")


@pytest.mark.parametrize(
    ("gpus", "model", "chosen", "all_reduce_fail"),
    [
        (8, "NVIDIA H200", "h200", 330),
        (4, "NVIDIA H200", "h200-4gpu", 320),
        (2, "NVIDIA H200", "h200-2gpu", 295),
        (8, "NVIDIA H100 80GB HBM3", "h100", 330),
    ],
)
def test_the_set_of_the_models_shape_judges_inside_the_node(shipped, gpus, model, chosen, all_reduce_fail):
    t = shipped.thresholds_for(LOCAL, gpu_model=model, gpus_per_node=gpus)
    assert t.name == chosen
    line = t["nccl.all_reduce.intra_node"]
    assert line.fail_below == all_reduce_fail and line.evidence
    # the report names the set in force, and the set whose table holds an inherited line
    assert f"[thresholds.{chosen}.nccl.all_reduce.intra_node]" in line.source


@pytest.mark.parametrize(("gpus", "model"), [(3, "NVIDIA H200"), (1, "NVIDIA H200"), (4, "NVIDIA H100 80GB HBM3")])
def test_a_shape_without_a_set_has_no_intra_node_line_and_says_why(shipped, gpus, model):
    t = shipped.thresholds_for(LOCAL, gpu_model=model, gpus_per_node=gpus)
    assert t.get("nccl.all_reduce.intra_node") is None
    with pytest.raises(MissingThresholdError) as err:
        t["nccl.all_gather.intra_node"]
    text = str(err.value)
    assert text.count(f"no intra-node NCCL lines for {gpus} × {model}") == 1
    assert "8 GPUs per node" in text and "--gpucluster-calibrate=PATH" in text
    assert f"gpus_per_node = {gpus}" in text
    # every line that does not depend on the shape stays in force
    assert t["compute.matmul_bf16"].fail_below and t["train.ddp.mfu"].fail_below


def test_a_four_gpu_node_is_not_judged_by_eight_gpu_nvls_lines(shipped):
    t = shipped.thresholds_for(LOCAL, gpu_model="NVIDIA H200", gpus_per_node=4)
    assert t.get("nccl.all_reduce.intra_node_nvls") is None
    assert t.other_shapes["nccl.all_reduce.intra_node_nvls"] == ("h200", 8)


def test_a_named_set_of_another_shape_loses_its_intra_node_lines(shipped):
    # the 4-GPU test machine's set named by a profile whose nodes have 2 GPUs
    profile = Profile("p", executor="slurm", nodes=2, gpus_per_node=2, gpu_model="NVIDIA H200", thresholds="h200-4gpu")
    t = shipped.thresholds_for(profile)
    assert t.name == "h200-4gpu" and t.get("nccl.all_reduce.intra_node") is None
    assert "4 GPUs per node ([thresholds.h200-4gpu])" in t.missing("nccl.all_reduce.intra_node")


def test_without_a_known_shape_the_first_matching_set_applies(shipped):
    assert shipped.thresholds_for(LOCAL, gpu_model="NVIDIA H200").name == "h200"


def test_sets_without_a_shape_and_cpu_nodes_are_unchanged(shipped):
    t = shipped.thresholds_for(shipped.profile("ci"), gpu_model="cpu")
    assert t.name == "cpu" and not t.other_shapes and t["nccl.all_reduce.intra_node"].fail_below == 0.001


def test_gpus_per_node_is_inherited_and_checked(tmp_path):
    path = tmp_path / "t.toml"
    line = '"nccl.all_reduce.intra_node" = { unit = "GB/s", fail_below = 100, source = "measured" }'
    path.write_text(
        '[profiles.p]\nexecutor = "local"\n'
        f'[thresholds.a]\nmatch = ["X1"]\ngpus_per_node = 8\n{line}\n'
        '[thresholds.b]\nextends = "a"\n'
        '[thresholds.c]\nmatch = ["X1"]\ngpus_per_node = 2\nextends = "a"\n'
    )
    config = load(path)
    assert config.shapes == {"a": 8, "b": 8, "c": 2}
    # c inherits a's 8-GPU line: on 2 GPUs it is not in force
    t = config.thresholds_for(config.profile("p"), gpu_model="X1", gpus_per_node=2)
    assert t.name == "c" and t.get("nccl.all_reduce.intra_node") is None
    path.write_text('[profiles.p]\nexecutor = "local"\n[thresholds.a]\ngpus_per_node = 0\n')
    with pytest.raises(ConfigError, match=r"thresholds\.a\.gpus_per_node: expected the number of GPUs"):
        load(path)


def test_path_only_must_be_a_boolean(tmp_path):
    path = tmp_path / "t.toml"
    path.write_text(
        '[profiles.p]\nexecutor = "local"\n[thresholds.a]\n'
        '"nccl.all_reduce.inter_node" = { unit = "GB/s", fail_below = 0.01, path_only = "yes" }\n'
    )
    with pytest.raises(ConfigError, match=r"nccl\.all_reduce\.inter_node\.path_only: expected true"):
        load(path)

"""tools/prove-verdicts writes a thresholds file for its busbw fault run: it must load with the
plugin's own loader, keep the copied profile's settings, and move only the one fail line."""

from __future__ import annotations

import dataclasses
import importlib.machinery
import importlib.util
from pathlib import Path

import pytest

from pytest_gpucluster import config

REPO = Path(__file__).resolve().parents[2]


def _tool():
    loader = importlib.machinery.SourceFileLoader("prove_verdicts", str(REPO / "tools" / "prove-verdicts"))
    spec = importlib.util.spec_from_loader("prove_verdicts", loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


@pytest.mark.parametrize(("cluster", "base_set"), [("testbox", "h200-4gpu"), ("ci", "cpu")])
def test_busbw_fault_file_moves_one_line_and_keeps_the_profile(tmp_path, cluster, base_set):
    text = (REPO / "thresholds.toml").read_text()
    path = tmp_path / "thresholds.toml"
    path.write_text(_tool().busbw_above_thresholds(text, cluster, base_set, 353.8, 389.2))
    loaded = config.load(path)
    original, fault = loaded.profile(cluster), loaded.profile("busbw-above")
    assert fault.thresholds == "busbw-above"
    # Everything but the name and the set is the copied profile's (nested tables included).
    assert (fault.executor, fault.nodes, fault.gpus_per_node, fault.nccl, fault.env) == (
        original.executor,
        original.nodes,
        original.gpus_per_node,
        original.nccl,
        original.env,
    )
    moved = loaded.thresholds_for(fault)
    kept = loaded.thresholds_for(original, gpu_model=base_set)  # "cpu" matches the set of that name
    assert moved["nccl.all_reduce.intra_node"].fail_below == 389.2
    # the same line; each set in force names itself as where it is read
    metric = "nccl.all_gather.intra_node"
    assert dataclasses.replace(moved[metric], source="") == dataclasses.replace(kept[metric], source="")

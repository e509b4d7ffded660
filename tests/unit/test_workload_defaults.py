"""A profile's [training] and [compute] tables are the workloads' own configs: their defaults are
written once (in workloads/), a benchmark run without a profile measures the same thing as the
acceptance suite, and the node-side code imports nothing from the login-side config package."""

from __future__ import annotations

import ast
import textwrap
from dataclasses import fields
from pathlib import Path

import pytest

from pytest_gpucluster.config import ConfigError, Profile, load
from pytest_gpucluster.config.profile import PROFILE_KEYS
from pytest_gpucluster.workloads.compute import ComputeConfig
from pytest_gpucluster.workloads.training import TrainConfig, plan_training

WORKLOADS = Path(__file__).resolve().parents[2] / "src" / "pytest_gpucluster" / "workloads"

BASE = """
[profiles.lab]
executor = "local"
"""


def _load(tmp_path: Path, text: str) -> Profile:
    path = tmp_path / "thresholds.toml"
    path.write_text(textwrap.dedent(BASE + text))
    return load(path).profiles["lab"]


def test_profile_defaults_are_the_workloads_defaults(tmp_path):
    profile = _load(tmp_path, "")
    assert profile.training == TrainConfig() and profile.compute == ComputeConfig()


@pytest.mark.parametrize("config", [TrainConfig, ComputeConfig])
def test_every_profile_key_is_a_field_of_the_workload_config(config):
    assert set(PROFILE_KEYS[config]) <= {f.name for f in fields(config)}


def test_profile_sets_the_listed_keys_and_sizes_take_units(tmp_path):
    profile = _load(
        tmp_path,
        '[profiles.lab.training]\nd_model = 64\ntimeout_s = 240\n[profiles.lab.compute]\ncopy_bytes = "16MiB"\n',
    )
    assert (profile.training.d_model, profile.training.timeout_s) == (64, 240)
    assert profile.compute.copy_bytes == 16 * 2**20
    assert profile.training.lr == TrainConfig.lr  # not a profile key: the workload's default


def test_a_workload_field_outside_the_profile_keys_is_unknown(tmp_path):
    with pytest.raises(ConfigError) as info:
        _load(tmp_path, "[profiles.lab.training]\nlr = 0.1\n")
    assert str(info.value).endswith(
        "profiles.lab.training.lr: unknown key. Known keys: d_model, n_layers, n_heads, seq_len, vocab, "
        "micro_batch, grad_accum, steps, warmup_steps, stability_steps, compile, timeout_s."
    )


def test_tiny_stand_in_keeps_the_profiles_timeout():
    plan = plan_training(TrainConfig(timeout_s=240), gpus_per_node=0, real_gpus=False)
    assert plan.timeout_s == plan.config.timeout_s == 240 and plan.note


@pytest.mark.parametrize("module", sorted(WORKLOADS.glob("*.py")), ids=lambda p: p.name)
def test_workloads_import_nothing_from_config(module):
    tree = ast.parse(module.read_text())
    imported = [n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
    imported += [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
    assert not [m for m in imported if m.startswith("pytest_gpucluster.config")]
    assert not [
        n
        for n in ast.walk(tree)
        if isinstance(n, ast.ImportFrom)
        and n.module == "pytest_gpucluster"
        and any(a.name == "config" for a in n.names)
    ]

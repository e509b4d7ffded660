"""Across-node busbw lines derived from the profile's fabric, the across-node algorithm setting
and the NVLS-on metrics: what thresholds_for builds, and what a bad setting is answered with."""

from __future__ import annotations

import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest

from pytest_gpucluster.checks.nccl import metric_name
from pytest_gpucluster.config import METRICS, load
from pytest_gpucluster.errors import ConfigError
from pytest_gpucluster.run.areas.nccl_jobs import inter_env

REPO_THRESHOLDS = Path(__file__).resolve().parents[2] / "thresholds.toml"

LAB = """
[profiles.lab]
executor = "slurm"
partition = "gpu"
nodes = 2
gpus_per_node = 8
gpu_model = "NVIDIA H100 80GB HBM3"
ib_hcas = 8
ib_rate_gbps = 400

[thresholds.default]
"gpu.temperature" = { unit = "C", fail_above = 85, warn_above = 75 }

[thresholds.h100]
match = ["H100"]
[thresholds.h100.nccl.all_reduce]
intra_node = { unit = "GB/s", fail_below = 330, warn_below = 355 }
"""


def config_of(tmp_path: Path, text: str):
    path = tmp_path / "thresholds.toml"
    path.write_text(textwrap.dedent(text))
    return load(path)


def error_of(tmp_path: Path, text: str) -> str:
    with pytest.raises(ConfigError) as info:
        config_of(tmp_path, text)
    return str(info.value).replace(str(tmp_path / "thresholds.toml"), "T")


def test_nebius_lines_are_derived_from_eight_ndr_rails():
    config = load(REPO_THRESHOLDS)
    lines = config.thresholds_for(config.profiles["nebius"])
    for op in ("all_reduce", "all_gather", "reduce_scatter", "broadcast"):
        t = lines[f"nccl.{op}.inter_node"]
        assert (t.fail_below, t.warn_below, t.unit) == (300.0, 340.0, "GB/s")
        assert t.source.startswith("derived: 8 × 400 Gb/s = 400 GB/s per node (the Ring bound); fail × 0.75 = 300")
        assert "[profiles.nebius] ib_hcas, ib_rate_gbps" in t.source
    # alltoall: half of every rank's buffer leaves its node; 400/8 × 2/1 × 15/16 = 93.75 GB/s
    a2a = lines["nccl.alltoall.inter_node"]
    assert a2a.fail_below == pytest.approx(70.312) and a2a.warn_below == pytest.approx(79.688)
    assert "400/8 × 2/1 × 15/16 = 93.75 GB/s" in a2a.source
    assert config.thresholds_for(config.profiles["nebius-h200"])["nccl.all_reduce.inter_node"].fail_below == 300


def test_four_hdr_rails_give_a_quarter_of_the_line(tmp_path):
    config = config_of(
        tmp_path, LAB.replace("ib_hcas = 8", "ib_hcas = 4").replace("ib_rate_gbps = 400", "ib_rate_gbps = 200")
    )
    t = config.thresholds_for(config.profiles["lab"])["nccl.all_gather.inter_node"]
    assert (t.fail_below, t.warn_below) == (75.0, 85.0)
    assert t.source.startswith("derived: 4 × 200 Gb/s = 100 GB/s per node")


def test_the_failure_sentence_shows_the_arithmetic():
    from pytest_gpucluster.verdict import Measurement, judge

    config = load(REPO_THRESHOLDS)
    t = config.thresholds_for(config.profiles["nebius"])["nccl.all_reduce.inter_node"]
    sentence = judge(Measurement("nccl.all_reduce.inter_node", 160.0, "GB/s", "n1+n2"), t).sentence
    assert "below the fail line 300 GB/s" in sentence
    assert "derived: 8 × 400 Gb/s = 400 GB/s per node" in sentence


@pytest.mark.parametrize("profile", ["ci", "testbox", "local"])
def test_nothing_is_derived_without_a_fabric(profile):
    config = load(REPO_THRESHOLDS)
    lines = config.thresholds_for(config.profiles[profile])
    for op in ("all_reduce", "alltoall"):
        t = lines.get(f"nccl.{op}.inter_node")
        assert t is None or not t.source.startswith("derived")
    if profile == "ci":  # the cpu set's floors apply as written
        assert lines["nccl.all_reduce.inter_node"].fail_below == 0.001


def test_no_hcas_or_one_node_derive_nothing(tmp_path):
    for text in (LAB.replace("ib_hcas = 8", "ib_hcas = 0"), LAB.replace("nodes = 2", "nodes = 1")):
        config = config_of(tmp_path, text)
        assert config.thresholds_for(config.profiles["lab"]).get("nccl.all_reduce.inter_node") is None


def test_an_explicit_line_wins_over_the_derived_one(tmp_path):
    text = LAB + 'inter_node = { unit = "GB/s", fail_below = 350, warn_below = 370 }\n'
    config = config_of(tmp_path, text)
    lines = config.thresholds_for(config.profiles["lab"])
    explicit = lines["nccl.all_reduce.inter_node"]
    assert explicit.fail_below == 350
    assert explicit.source.endswith("[thresholds.h100.nccl.all_reduce.inter_node]")
    assert lines["nccl.all_gather.inter_node"].source.startswith("derived")  # the others are still derived


def test_fractions_are_a_profile_setting(tmp_path):
    text = LAB + "\n[profiles.lab.nccl]\ninter_node_fail_fraction = 0.8\ninter_node_warn_fraction = 0.9\n"
    config = config_of(tmp_path, text)
    t = config.thresholds_for(config.profiles["lab"])["nccl.all_reduce.inter_node"]
    assert (t.fail_below, t.warn_below) == (320.0, 360.0)
    assert "fail × 0.8 = 320, warn × 0.9 = 360 GB/s" in t.source


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        (
            "inter_node_fail_fraction = 1.5",
            "T: profiles.lab.nccl.inter_node_fail_fraction: a fraction of the fabric's line rate, 0 < f ≤ 1; got 1.5.",
        ),
        (
            "inter_node_warn_fraction = 0",
            "T: profiles.lab.nccl.inter_node_warn_fraction: a fraction of the fabric's line rate, 0 < f ≤ 1; got 0.",
        ),
        (
            "inter_node_fail_fraction = 0.9",
            "T: profiles.lab.nccl.inter_node_warn_fraction: 0.85 is under inter_node_fail_fraction (0.9); "
            "the warn line must sit between pass and fail.",
        ),
        (
            'inter_node_fail_fraction = "most"',
            "T: profiles.lab.nccl.inter_node_fail_fraction: expected a finite number, got 'most'.",
        ),
        (
            "inter_node_fail_fracton = 0.7",
            "T: profiles.lab.nccl.inter_node_fail_fracton: unknown key. Perhaps you meant 'inter_node_fail_fraction'?",
        ),
        (
            'inter_node_algo = "Rnig"',
            "T: profiles.lab.nccl.inter_node_algo: 'Rnig' is not an NCCL algorithm; write \"auto\" or a list of "
            'Ring, Tree, CollNetDirect, CollNetChain, NVLS, NVLSTree, PAT ("^" first excludes them). '
            "Perhaps you meant 'Ring'?",
        ),
    ],
)
def test_bad_settings_name_the_key(tmp_path, setting, message):
    assert error_of(tmp_path, LAB + f"\n[profiles.lab.nccl]\n{setting}\n") == message


@pytest.mark.parametrize(
    ("algo", "env"),
    [
        ("Ring", {"NCCL_ALGO": "Ring"}),
        ("tree,ring", {"NCCL_ALGO": "tree,ring"}),
        ("^NVLS,NVLSTree", {"NCCL_ALGO": "^NVLS,NVLSTree"}),
        ("auto", {}),
    ],
)
def test_the_across_node_algorithm_is_the_profiles(tmp_path, algo, env):
    config = config_of(tmp_path, LAB + f'\n[profiles.lab.nccl]\ninter_node_algo = "{algo}"\n')
    profile = config.profiles["lab"]
    gc = SimpleNamespace(profile=profile, gpus_per_node=0)  # no real GPUs: no NCCL log files
    assert inter_env(gc) == env


def test_ring_is_the_default_and_nccl_logs_go_to_the_job_folder(tmp_path):
    config = config_of(tmp_path, LAB)
    gc = SimpleNamespace(profile=config.profiles["lab"], gpus_per_node=8, job_root=tmp_path / "jobs")
    env = inter_env(gc)
    assert env["NCCL_ALGO"] == "Ring"
    assert (env["NCCL_DEBUG"], env["NCCL_DEBUG_SUBSYS"]) == ("INFO", "INIT,NET,ENV")
    assert env["NCCL_DEBUG_FILE"].startswith(str(tmp_path / "jobs" / "nccl-inter-"))
    assert env["NCCL_DEBUG_FILE"].endswith(".%h.%p.log")
    # a profile that sets NCCL's logging keeps it
    own = config_of(tmp_path, LAB + '\n[profiles.lab.env]\nNCCL_DEBUG = "WARN"\n').profiles["lab"]
    assert inter_env(SimpleNamespace(profile=own, gpus_per_node=8)) == {"NCCL_ALGO": "Ring"}


def test_nvls_on_picks_the_nvls_metrics_of_the_collectives_nvls_runs():
    config = load(REPO_THRESHOLDS)
    profile = config.profiles["nebius"]
    assert profile.nccl.nvls
    thresholds = config.thresholds_for(profile)
    for op in ("all_reduce", "all_gather", "reduce_scatter"):
        metric = metric_name(op, "intra_node", nvls=True)
        assert metric == f"nccl.{op}.intra_node_nvls"
        # named by the set in force, with the set whose table holds it
        assert thresholds[metric].source.endswith(
            f"[thresholds.nebius.nccl.{op}.intra_node_nvls] (inherited from [thresholds.h100])"
        )
    assert metric_name("alltoall", "intra_node", nvls=True) == "nccl.alltoall.intra_node"
    assert metric_name("all_reduce", "inter_node", nvls=True) == "nccl.all_reduce.inter_node"
    assert not config.profiles["testbox"].nccl.nvls
    assert metric_name("all_gather", "intra_node", nvls=False) == "nccl.all_gather.intra_node"


def test_nvls_scope_exists_only_where_nccl_has_nvls():
    assert {"nccl.all_gather.intra_node_nvls", "nccl.reduce_scatter.intra_node_nvls"} <= set(METRICS)
    assert "nccl.alltoall.intra_node_nvls" not in METRICS and "nccl.broadcast.intra_node_nvls" not in METRICS
    config = load(REPO_THRESHOLDS)
    h200 = config.thresholds_for(config.profiles["nebius-h200"])
    assert h200["nccl.all_gather.intra_node_nvls"].fail_below == 300  # inherited from h100

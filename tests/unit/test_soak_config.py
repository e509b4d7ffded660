"""What a soak is asked with and where it stands before any job: durations, the profile's [soak]
table and the rules of [soak.rules] (a profile's own keys laid over them), the option, the
partition's time limit, the selection (not applicable without a soak, not judged when the profile
requires one and none was asked for), the order of the tests, and the node-side pieces that are
pure (the NVML readings of a cycle, reading a stream while it is written)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_gpucluster.config import ConfigError, load
from pytest_gpucluster.config.options import soak_fits, with_soak
from pytest_gpucluster.config.soak import SoakSettings, parse_duration, say_duration
from pytest_gpucluster.plan import jobs, last_order
from pytest_gpucluster.plan.selection import Needs, Shape, cannot_run, not_applicable
from pytest_gpucluster.slurm.health import parse_partitions, slurm_minutes
from pytest_gpucluster.workloads import soak as soak_load

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("30m", 1800), ("8h", 28800), ("1h30m", 5400), ("90s", 90), ("2d", 172800), ("45", 45), ("0", 0), ("10min", 600)],
)
def test_durations(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "soon", "8 hours", "1h-30m", "h"])
def test_what_is_no_duration_is_refused(text):
    with pytest.raises(ValueError, match="is not a duration"):
        parse_duration(text)


def test_durations_said_as_a_person_reads_them():
    assert [say_duration(s) for s in (42, 600, 3723, 28800)] == ["42 s", "10 min", "1 h 2 min", "8 h 0 min"]


def _file(tmp_path: Path, extra: str) -> Path:
    path = tmp_path / "thresholds.toml"
    path.write_text((REPO / "thresholds.toml").read_text() + extra)
    return path


def test_the_shipped_rules_and_a_profiles_own_keys_over_them(tmp_path):
    cfg = load(_file(tmp_path, '\n[profiles.x]\nexecutor = "local"\n[profiles.x.soak.rules.drift]\nfail = 0.2\n'))
    shipped = cfg.profiles["local"].soak_rules
    assert shipped.missing() == [] and shipped.drift is not None and shipped.drift.fail == 0.1
    own = cfg.profiles["x"].soak_rules.drift
    assert own is not None and (own.fail, own.warn, own.early_cycles) == (0.2, 0.05, 3)


def test_a_bad_rule_is_refused_naming_its_key(tmp_path):
    bad = '\n[profiles.x]\nexecutor = "local"\n[profiles.x.soak.rules.drift]\nmetrics = ["tflop"]\n'
    with pytest.raises(ConfigError, match=r"profiles\.x\.soak\.rules\.drift: metrics \['tflop'\]: name what a cycle"):
        load(_file(tmp_path, bad))
    with pytest.raises(ConfigError, match=r"profiles\.x\.soak: duration: 'soon' is not a duration"):
        load(_file(tmp_path, '\n[profiles.x]\nexecutor = "local"\n[profiles.x.soak]\nduration = "soon"\n'))


def test_the_profiles_soak_table_sets_the_cycle_over_the_sizes_of_its_nodes():
    soak = SoakSettings(duration="8h", cycle_s=30, copy_bytes=2**20)
    assert soak.duration_s == 28800
    on_gpus, on_cpus = soak.config(real_gpus=True), soak.config(real_gpus=False)
    assert (on_gpus.cycle_s, on_gpus.matmul_n, on_gpus.copy_bytes) == (30, 8192, 2**20)
    assert (on_cpus.cycle_s, on_cpus.matmul_n) == (30, soak_load.TINY.matmul_n)


def test_the_option_sets_the_duration_and_a_file_without_rules_is_refused(tmp_path):
    profile = load(REPO / "thresholds.toml").profiles["ci"]
    assert with_soak(profile, "8h", True, file="t.toml", shipped=None).soak.duration_s == 28800
    with pytest.raises(ConfigError, match=r"--gpucluster-soak=eight: 'eight' is not a duration"):
        with_soak(profile, "eight", False, file="t.toml", shipped=None)
    bare = tmp_path / "bare.toml"
    bare.write_text('[profiles.p]\nexecutor = "local"\n[thresholds.default]\n')
    p = load(bare).profiles["p"]
    assert with_soak(p, None, False, file=str(bare), shipped=None) is not None  # no soak asked: no rules needed
    with pytest.raises(ConfigError) as err:
        with_soak(p, "30m", False, file=str(bare), shipped=Path("/x/thresholds.toml"))
    assert str(err.value).startswith(
        f"{bare}: a soak of 30 min was asked for (--gpucluster-soak=30m), but the file has no "
        "[soak.rules.behind_node_best], [soak.rules.drift], "
    )
    assert "Copy the [soak.rules.*] tables from the file this installation ships (/x/thresholds.toml)" in str(err.value)


def test_a_soak_longer_than_the_partition_allows_is_refused():
    soak_fits(70, 3600 * 2, "gpu", "--gpucluster-soak=1h")  # fits
    soak_fits(10_000, None, "gpu", "--gpucluster-soak=7d")  # unlimited
    with pytest.raises(ConfigError, match=r"needs 126 min .* partition 'debug' allows 1 h 0 min \(MaxTime\)"):
        soak_fits(126, 3600, "debug", "--gpucluster-soak=2h")


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("UNLIMITED", None), ("60", 3600), ("1:30", 90), ("2:00:00", 7200), ("1-00:00:00", 86400), ("2-12", 216000)],
)
def test_slurm_time_limits(text, seconds):
    assert slurm_minutes(text) == seconds


def test_a_partitions_max_time_is_read():
    line = "PartitionName=debug AllowGroups=ALL Default=YES MaxTime=01:00:00 Nodes=node[1-4] State=UP TotalNodes=4"
    (part,) = parse_partitions(line)
    assert part.max_time_s == 3600


SHAPE = Shape(
    profile="p", executor="slurm", nodes=2, usable_nodes=2, gpus_per_node=8, gpus_declared=True,
    gpus_are_real=True, ib_hcas=8, accounting=True,
)  # fmt: skip


def test_the_soak_is_not_applicable_without_one_asked_for_and_not_judged_where_required():
    soak = Needs("t::test_soak[n1]", soak=True)
    assert (
        not_applicable(soak, SHAPE)
        == "no soak was asked for (--gpucluster-soak=DURATION, or duration in [profiles.p.soak])"
    )
    required = Shape(**{**SHAPE.__dict__, "soak_required": True})
    assert not_applicable(soak, required) is None
    assert cannot_run(soak, required).startswith("profile 'p' requires a soak (soak.required) and none was asked for")
    asked = Shape(**{**SHAPE.__dict__, "soak_s": 600.0})
    assert not_applicable(soak, asked) is None and cannot_run(soak, asked) is None


def test_the_soak_runs_after_the_one_shot_checks_and_before_the_jobs_that_run_last():
    uses = [[jobs.SOAK], [jobs.FABRIC_AFTER], [jobs.NCCL_INTRA], [jobs.SOAK], [jobs.SHAREDFS]]
    assert last_order(uses) == [2, 4, 0, 3, 1]


def test_a_cycles_nvml_readings_as_the_record_keeps_them():
    rows = [
        (0.0, 1980, 60, 70, 690.0, 0x4),  # power cap
        (1.0, 1410, 70, 72, 700.0, 0x8 | 0x4),  # HW slowdown begins
        (2.0, 1400, 71, 71, 698.0, 0x8),
        (3.0, 1980, 65, -1, 650.0, 0x0),
    ]
    out = soak_load.summarize_samples(rows, previous_mask=0x4)
    assert out == {
        "samples": 4,
        "sm_mhz": 1692,
        "sm_mhz_min": 1400,
        "temp_c": 71,
        "power_w": 684.5,
        "power_w_max": 700.0,
        "last_mask": 0,
        "mem_temp_c": 72,
        "throttle": {"hw_slowdown": [1, 2.0], "sw_power_cap": [0, 2.0]},
    }
    assert soak_load.summarize_samples([], 0) == {"samples": 0}


def test_a_stream_is_read_to_its_last_whole_line(tmp_path):
    path = tmp_path / "n1.gpu0.jsonl"
    path.write_text(json.dumps({"kind": "start"}) + "\n" + '{"kind": "cyc')
    records, offset = soak_load.read_stream(path)
    assert records == [{"kind": "start"}] and offset == len(json.dumps({"kind": "start"})) + 1
    with path.open("a") as f:
        f.write('le", "cycle": 0}\n')
    more, _ = soak_load.read_stream(path, offset)
    assert more == [{"kind": "cycle", "cycle": 0}]
    assert soak_load.read_stream(tmp_path / "none.jsonl", 5) == ([], 5)

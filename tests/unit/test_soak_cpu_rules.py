"""The soak's rules for CPU ranks standing in for GPUs ([soak.cpu_rules] over [soak.rules]): the
same figures pass on CPU ranks and fail on GPUs, a profile's keys still apply, every finding names
the tables its rule was read from, a file without the CPU tables judges CPU ranks by the GPU
rules, and a wrong key in the new tables is refused naming the file and the key."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from pytest_gpucluster.checks import soak as checks
from pytest_gpucluster.checks.soak import Lines, SoakTrack
from pytest_gpucluster.config import ConfigError, load
from pytest_gpucluster.config.fabric_rules import DEFAULT_RULES
from pytest_gpucluster.config.profile import soak_rules_for
from pytest_gpucluster.config.soak import SoakRules
from pytest_gpucluster.report.soak import rules_in_force
from pytest_gpucluster.results import codec

REPO = Path(__file__).resolve().parents[2]
T0 = 1_800_000_000.0
CYCLE = 4.0
LINES = Lines(temperature=(85.0, 75.0, "the set's gpu.temperature"), fabric=DEFAULT_RULES)


def ranks(values: dict[str, list[float]], *, cpu: bool) -> SoakTrack:
    """One node's ranks with these GEMM rates per cycle: CPU ranks as the soak records them (no
    NVML: no clocks, temperatures, throttling or ECC counts), or GPUs that NVML reads."""
    track = SoakTrack()
    for gpu, tflops in values.items():
        start = {"kind": "start", "node": "n1", "gpu": gpu, "t": T0, "device": "cpu" if cpu else "NVIDIA H100"}
        records: list[dict[str, Any]] = [start if cpu else {**start, "ecc_unc": 0}]
        for i, value in enumerate(tflops):
            cycle = {"kind": "cycle", "node": "n1", "gpu": gpu, "cycle": i, "t0": T0 + i * CYCLE}
            cycle.update({"t1": T0 + (i + 1) * CYCLE, "tflops": value})
            records.append(cycle if cpu else {**cycle, "samples": 4, "temp_c": 60, "ecc_unc": 0})
        track.add(records)
    return track


# Two ranks, the second 14 % behind the first in cycles 2-4, three in a row, then level again.
LAGGING = {"gpu0": [0.05] * 6, "gpu1": [0.05, 0.05, 0.043, 0.043, 0.043, 0.05]}


def _file(tmp_path: Path, extra: str, *, shipped: bool = True) -> Path:
    path = tmp_path / "thresholds.toml"
    path.write_text(((REPO / "thresholds.toml").read_text() if shipped else "") + extra)
    return path


def _judged(track: SoakTrack, rules: SoakRules) -> list[tuple[str, str, str]]:
    return [(f.severity, f.metric, (f.threshold or {}).get("source", "")) for f in checks.judge(track, rules, LINES)]


def test_cpu_ranks_14_percent_behind_pass_on_the_cpu_rules_and_the_same_figures_fail_on_gpus():
    config = load(REPO / "thresholds.toml")
    local = config.profile("local")
    on_cpus = soak_rules_for(local, real_gpus=False)
    on_gpus = soak_rules_for(local, real_gpus=True)
    # The throttling and memory rules are the GPU rules: they find nothing on ranks NVML never read.
    assert on_cpus.hw_slowdown == on_gpus.hw_slowdown and on_cpus.memory_errors == on_gpus.memory_errors
    assert checks.judge(ranks(LAGGING, cpu=True), on_cpus, LINES) == []
    (found,) = checks.judge(ranks(LAGGING, cpu=False), on_gpus, LINES)
    assert (found.severity, found.gpu, found.cycle, found.metric) == ("fail", 1, 2, "soak.tflops.vs_node_best")
    assert "14.0 % below its node's best GPU" in found.text
    assert found.threshold == {
        "tolerance": 0.1,
        "cycles": 3,
        "metrics": ["tflops"],
        "source": f"{REPO / 'thresholds.toml'} [soak.rules.behind_node_best]",
        "evidence": on_gpus.behind_node_best.source if on_gpus.behind_node_best else "",
    }


def test_the_cpu_rules_are_the_former_ci_lines_and_name_their_tables():
    config = load(REPO / "thresholds.toml")
    for name in ("ci", "local"):
        rules = soak_rules_for(config.profile(name), real_gpus=False)
        assert rules.drift is not None and rules.behind_node_best is not None
        assert (rules.drift.warn, rules.drift.fail, rules.drift.metrics) == (0.3, 0.4, ("tflops",))
        assert (rules.drift.early_cycles, rules.drift.cycles) == (3, 3)  # the GPU rule's
        assert rules.behind_node_best.tolerance == 0.5 and "CPU stand-ins" in rules.behind_node_best.source
        assert rules.where("drift") == "[soak.cpu_rules.drift] over [soak.rules.drift]"
        assert rules.where("hw_slowdown") == "[soak.rules.hw_slowdown]"
        assert rules.for_cpu_ranks() == "[soak.cpu_rules] over [soak.rules]"
    gpus = config.profile("nebius").soak_rules
    assert gpus.drift is not None and (gpus.drift.fail, gpus.where("drift")) == (0.1, "[soak.rules.drift]")


def test_a_cpu_ranks_collapse_fails_naming_the_cpu_table_in_the_finding_and_the_results():
    rules = soak_rules_for(load(REPO / "thresholds.toml").profile("local"), real_gpus=False)
    fallen = {"gpu0": [0.05, 0.05, 0.05, 0.05, *[0.025] * 4], "gpu1": [0.05, 0.05, 0.05, 0.05, *[0.025] * 4]}
    track = ranks(fallen, cpu=True)
    found = checks.judge(track, rules, LINES)
    assert {f.metric for f in found} == {"soak.tflops.drift"} and {f.severity for f in found} == {"fail"}
    where = f"{REPO / 'thresholds.toml'} [soak.cpu_rules.drift] over [soak.rules.drift]"
    encoded = codec.encode_finding(found[0])
    assert encoded["threshold"]["source"] == where and (encoded["threshold"]["warn"], encoded["threshold"]["fail"]) == (
        0.3,
        0.4,
    )
    assert encoded["threshold"]["evidence"].startswith("CPU stand-ins on two shared cores")
    section = checks.section(track, requested_s=32, config={}, rules=rules, nodes={})
    assert section["rules"]["drift"]["tables"] == ["soak.cpu_rules.drift", "soak.rules.drift"]
    assert section["rules"]["thermal"]["tables"] == ["soak.rules.thermal"]


def test_a_profiles_keys_still_apply(tmp_path):
    extra = """
[profiles.x]
executor = "local"
[profiles.x.soak.rules.behind_node_best]
cycles = 5
[profiles.x.soak.rules.drift]
fail = 0.2
[profiles.strict]
executor = "local"
[profiles.strict.soak.cpu_rules.behind_node_best]
tolerance = 0.1
source = "a site that wants the GPUs' line on its CPU ranks"
"""
    config = load(_file(tmp_path, extra))
    x = config.profile("x")
    # A GPU rule's key the CPU table does not set holds for CPU ranks too; one it sets does not.
    on_cpus, on_gpus = soak_rules_for(x, real_gpus=False), soak_rules_for(x, real_gpus=True)
    assert on_cpus.behind_node_best is not None and on_gpus.behind_node_best is not None
    assert (on_cpus.behind_node_best.cycles, on_cpus.behind_node_best.tolerance) == (5, 0.5)
    assert (on_gpus.behind_node_best.cycles, on_gpus.behind_node_best.tolerance) == (5, 0.1)
    assert on_gpus.drift is not None and on_cpus.drift is not None
    assert (on_gpus.drift.fail, on_cpus.drift.fail) == (0.2, 0.4)
    assert on_cpus.where("behind_node_best") == (
        "[soak.cpu_rules.behind_node_best] over [profiles.x.soak.rules.behind_node_best] over "
        "[soak.rules.behind_node_best]"
    )
    # Lagging 14 % for 3 cycles: under the 5 cycles in a row the profile asks for.
    assert checks.judge(ranks(LAGGING, cpu=False), on_gpus, LINES) == []
    # A profile's own key for CPU ranks wins over [soak.cpu_rules].
    strict = soak_rules_for(config.profile("strict"), real_gpus=False)
    assert _judged(ranks(LAGGING, cpu=True), strict) == [
        (
            "fail",
            "soak.tflops.vs_node_best",
            f"{tmp_path / 'thresholds.toml'} [profiles.strict.soak.cpu_rules.behind_node_best] over "
            "[soak.cpu_rules.behind_node_best] over [soak.rules.behind_node_best]",
        )
    ]


def test_a_gres_only_profile_cannot_set_a_gpu_key_its_cpu_ranks_never_use(tmp_path):
    extra = "\n[profiles.ci.soak.rules.drift]\nfail = 0.6\n"
    with pytest.raises(ConfigError) as err:
        load(_file(tmp_path, extra))
    assert str(err.value) == (
        f"{tmp_path / 'thresholds.toml'}: profiles.ci.soak.rules.drift: fail would never apply: this profile's "
        "ranks are CPU stand-ins (gpus_are_real = false), judged by [soak.cpu_rules.drift], which sets it. "
        "Set it in [profiles.ci.soak.cpu_rules.drift]."
    )
    fine = load(_file(tmp_path, "\n[profiles.ci.soak.cpu_rules.drift]\nfail = 0.6\n")).profile("ci")
    rules = soak_rules_for(fine, real_gpus=False)
    assert rules.drift is not None and (rules.drift.warn, rules.drift.fail) == (0.3, 0.6)


# A site's file from before the CPU tables: its profile and the soak's GPU rules only.
OLD_SITE = """
[profiles.site]
executor = "local"
[soak.rules.behind_node_best]
tolerance = 0.10
cycles = 3
source = "gpu-fryer"
[soak.rules.drift]
warn = 0.05
fail = 0.10
early_cycles = 3
cycles = 3
[soak.rules.hw_slowdown]
reasons = ["hw_slowdown"]
fail_per_min = 0.6
window_min = 10
[soak.rules.thermal]
reasons = ["sw_thermal_slowdown"]
fail_per_min = 0.6
window_min = 10
[soak.rules.power_brake]
reasons = ["hw_power_brake_slowdown"]
fail_per_min = 0.6
window_min = 10
[soak.rules.memory_errors]
"""


def test_a_file_without_the_cpu_tables_loads_and_judges_cpu_ranks_by_the_gpu_rules(tmp_path):
    path = _file(tmp_path, OLD_SITE, shipped=False)
    site = load(path).profile("site")
    on_cpus = soak_rules_for(site, real_gpus=False)
    assert on_cpus.missing() == [] and on_cpus.behind_node_best == site.soak_rules.behind_node_best
    assert on_cpus.drift == site.soak_rules.drift
    # It says so, and each finding names the GPU rule that judged the CPU ranks.
    assert on_cpus.for_cpu_ranks() == "the GPU rules ([soak.rules]): the file has no [soak.cpu_rules]"
    assert _judged(ranks(LAGGING, cpu=True), on_cpus) == [
        ("fail", "soak.tflops.vs_node_best", f"{path} [soak.rules.behind_node_best]")
    ]


@pytest.mark.parametrize(
    ("extra", "said"),
    [
        (
            "\n[soak.cpu_rules.dip]\nwran = 0.5\n",
            "soak.cpu_rules.dip.wran: unknown key. Perhaps you meant 'warn'?",
        ),
        (
            "\n[soak.cpu_rules.drfit]\nfail = 0.5\n",
            "soak.cpu_rules.drfit: unknown key. Perhaps you meant 'drift'?",
        ),
        (
            "\n[soak.cpu_rule.drift]\nfail = 0.5\n",
            "soak.cpu_rule: unknown key. Perhaps you meant 'cpu_rules'?",
        ),
        (
            "\n[soak.cpu_rules]\ndip = 0.5\n",
            "soak.cpu_rules.dip: expected a table [soak.cpu_rules.dip], got 0.5.",
        ),
        (
            '\n[soak.cpu_rules.dip]\nmetrics = ["tflop"]\n',
            "soak.cpu_rules.dip: metrics ['tflop']: name what a cycle measures",
        ),
        (
            '\n[profiles.x]\nexecutor = "local"\n[profiles.x.soak.cpu_rules.behind_node_best]\ntolerence = 0.2\n',
            "profiles.x.soak.cpu_rules.behind_node_best.tolerence: unknown key. Perhaps you meant 'tolerance'?",
        ),
    ],
)
def test_a_wrong_key_in_the_cpu_tables_is_refused_naming_the_file_and_the_key(tmp_path, extra, said):
    path = _file(tmp_path, extra)
    with pytest.raises(ConfigError) as err:
        load(path)
    assert str(err.value).startswith(f"{path}: {said}"), str(err.value)


def test_a_profiles_cpu_key_that_does_not_fit_says_how_the_cpu_rules_are_laid(tmp_path):
    extra = '\n[profiles.x]\nexecutor = "local"\n[profiles.x.soak.cpu_rules.drift]\nwarn = 0.5\n'
    with pytest.raises(ConfigError) as err:
        load(_file(tmp_path, extra))
    said = str(err.value)
    assert "profiles.x.soak.cpu_rules.drift: warn = 0.5 is past fail = 0.4" in said
    assert "CPU ranks standing in are judged by [soak.cpu_rules] and [profiles.x.soak.cpu_rules]" in said


def test_the_reports_rules_in_force_name_the_tables_beside_the_source():
    rules = soak_rules_for(load(REPO / "thresholds.toml").profile("local"), real_gpus=False)
    section = checks.section(SoakTrack(), requested_s=8, config={}, rules=rules, nodes={})
    shown = dict((name, (keys, source)) for name, keys, source in rules_in_force(section))
    keys, source = shown["drift"]
    assert keys == "warn 0.3; fail 0.4; early_cycles 3; cycles 3; metrics tflops"
    assert source.startswith("[soak.cpu_rules.drift] over [soak.rules.drift]: CPU stand-ins on two shared cores")
    assert shown["memory_errors"][1].startswith("[soak.rules.memory_errors]: any new uncorrectable error")

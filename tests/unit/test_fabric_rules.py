"""The fabric check's rules: counter families judged by rate (DCGM's and NVSentinel's lines), a
profile's [profiles.NAME.fabric.FAMILY] tables, and the folded sentences, on the representative
4×H200 NVLink snapshots built from a healthy node's measured rises (tests/data/fabric)."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from pytest_gpucluster.checks import fabric, fabric_text
from pytest_gpucluster.checks.fabric_text import Place
from pytest_gpucluster.config import load
from pytest_gpucluster.config.fabric_rules import DEFAULT_RULES, FAMILY_OF, KNOWN_COUNTERS, RuleError, with_overrides
from pytest_gpucluster.errors import ConfigError
from pytest_gpucluster.workloads.fabric_counters import FabricSnapshot, snapshot_from_dict

DATA = Path(__file__).parent.parent / "data" / "fabric"


def h200(name: str) -> FabricSnapshot:
    return snapshot_from_dict(json.loads((DATA / f"nvlink_4xH200_{name}_representative_sample.json").read_text()))


def test_every_counter_read_is_in_exactly_one_family():
    assert sorted(FAMILY_OF) == sorted(KNOWN_COUNTERS)
    assert all(rule.source for rule in DEFAULT_RULES.values())


@pytest.mark.parametrize(
    ("family", "increase", "seconds", "status"),
    [
        ("nvlink_replay", 1, 3600.0, "fail"),  # any increase
        ("nvlink_recovery", 0, 10.0, "note"),
        ("nvlink_crc", 7740, 321.0, "note"),  # 24.1/s per GPU: 18 links × 1.3/s, a healthy 4×H200
        ("nvlink_crc", 6322, 109.0, "note"),  # 58/s: the highest healthy rate recorded (docs/gpu-runs.md)
        ("nvlink_crc", 5617 // 2, 22.7, "note"),  # 124/s: a 2×H200 under 23 s of NCCL sweeps alone
        ("nvlink_crc", 32100, 321.0, "note"),  # 100/s per GPU: DCGM's line, under the densest healthy rate
        ("nvlink_crc", 64200, 321.0, "warn"),  # 200/s
        ("nvlink_crc", 160500, 321.0, "fail"),  # 500/s per GPU
        ("nvlink_crc", 160499, 321.0, "warn"),
        ("nvlink_ecc", 43000, 321.0, "note"),  # recorded, never judged by default
        ("symbol_error", 37, 815.0, "warn"),
        ("symbol_error", 10, 1.0, "fail"),
        ("link_error_recovery", 4, 60.0, "warn"),
        ("link_error_recovery", 5, 60.0, "fail"),  # 5/min
        ("local_ack_timeout_err", 300, 321.0, "warn"),
        ("local_ack_timeout_err", 321, 321.0, "fail"),  # 1/s
        ("rnr_nak_retry_err", 1, 1000.0, "fail"),
        ("ib_remote_errors", 10_000, 1.0, "warn"),  # another link's fault: never fails the node
        ("ib_sequence_errors", 10_000, 1.0, "note"),
    ],
)
def test_family_status_by_rate(family, increase, seconds, status):
    assert DEFAULT_RULES[family].status(increase, seconds) == status


def test_lines_read_as_a_person_writes_them():
    assert DEFAULT_RULES["nvlink_crc"].lines() == "warn ≥ 200/s, fail ≥ 500/s per GPU"
    assert DEFAULT_RULES["nvlink_replay"].lines() == "fail > 0"
    assert DEFAULT_RULES["link_error_recovery"].lines() == "warn > 0, fail ≥ 5/min per port"
    assert DEFAULT_RULES["nvlink_ecc"].lines() == "recorded, not judged"
    assert DEFAULT_RULES["pcie_replay"].lines() == "warn > 0, fail ≥ 8/min per GPU"


def test_places_fold_gpus_links_and_ports():
    every = [Place(f"gpu{g}", link) for g in range(4) for link in range(18)]
    assert fabric_text.places(every, {f"gpu{g}": 18 for g in range(4)}) == "gpu0–3"
    assert fabric_text.places([Place("gpu2", 5)], {"gpu2": 18}) == "gpu2 link 5"
    some = [Place("gpu0", 1), Place("gpu0", 2), Place("gpu0", 3), Place("gpu10", 7)]
    assert fabric_text.places(some, {"gpu0": 18, "gpu10": 18}) == "gpu0 links 1–3 and gpu10 link 7"
    ports = [Place(f"mlx5_{i} port 1") for i in (0, 1, 2, 3, 10)]
    assert fabric_text.places(ports) == "mlx5_0–3, 10 port 1"
    assert fabric_text.rates([21.24, 21.71], "s") == "21.2–21.7/s" and fabric_text.rate(5.6e-5) == "5.6e-05"


def test_a_healthy_4x_h200_is_noted_once_per_family_never_per_link():
    found = fabric.compare(h200("before"), h200("after_healthy"), nvlink_required=True)
    assert [(f.status, f.sentence) for f in found] == [
        ("note", "node1: NVLink CRC 21.2–21.7/s on gpu0–3 over 5 min 21 s (warn ≥ 200/s, fail ≥ 500/s per GPU)"),
        ("note", "node1: NVLink ECC 130–134/s on gpu0–3 over 5 min 21 s (recorded, not judged)"),
    ]
    assert fabric.judged(found) == []  # a healthy node stays clear of the warn line
    crc = found[0].detail
    assert len(crc) == 72 and {d["counter"] for d in crc} == {"nvlink_crc_data"}  # per link, in the record
    assert crc[0] == {"where": "gpu0 link 0", "counter": "nvlink_crc_data", "before": 91000, "after": 91267}


def test_one_replay_on_one_link_fails_naming_gpu_and_link_first():
    found = fabric.compare(h200("before"), h200("after_replay"), nvlink_required=True)
    failed = [f for f in fabric.judged(found) if f.severity == "fail"]
    assert [(f.text, f.scope, f.gpu, f.port) for f in failed] == [
        ("node1: NVLink replay +1 on gpu2 link 5 over 5 min 21 s (fail > 0)", "port", 2, "link 5")
    ]
    assert found[0].detail == ({"where": "gpu2 link 5", "counter": "nvlink_replay", "before": 0, "after": 1},)


def test_a_profile_moves_a_family_line(tmp_path):
    rules = with_overrides(
        {"nvlink_crc": {"fail_per_s": 20, "source": "site: our H200s"}, "nvlink_ecc": {"warn_per_min": 0}},
        "profiles.lab.fabric",
        "T",
    )
    crc = rules["nvlink_crc"]
    # a fail line under the suite's warn line leaves the family no warn line of its own
    assert (crc.warn, crc.fail, crc.source, crc.set_in) == (
        None,
        20,
        "site: our H200s",
        "T [profiles.lab.fabric.nvlink_crc]",
    )
    found = fabric.compare(h200("before"), h200("after_healthy"), rules, nvlink_required=True)
    assert [f.status for f in found] == ["fail", "warn"]
    assert "(fail ≥ 20/s per GPU): NVLink corrects a CRC error" in found[0].sentence
    loose = with_overrides({"rnr_nak_retry_err": {"fail_per_s": False, "warn_per_s": 0}})["rnr_nak_retry_err"]
    assert (loose.warn, loose.fail, loose.lines()) == (0, None, "warn > 0")
    per_min = with_overrides({"symbol_error": {"fail_per_min": 60}})["symbol_error"]
    assert per_min.fail == 1 and per_min.per == "s"  # held in the family's unit


BASE = """
[profiles.lab]
executor = "slurm"
partition = "gpu"
gpus_per_node = 8
"""


def _error(tmp_path: Path, table: str) -> str:
    path = tmp_path / "thresholds.toml"
    path.write_text(textwrap.dedent(BASE + table))
    with pytest.raises(ConfigError) as info:
        load(path)
    return str(info.value).replace(str(path), "T")


@pytest.mark.parametrize(
    ("table", "why"),
    [
        (
            "[profiles.lab.fabric.nvlink_crcs]\nfail_per_s = 1",
            "no such counter family. Perhaps you meant 'nvlink_crc'?",
        ),
        ("[profiles.lab.fabric.nvlink_crc_data]\nfail_per_s = 1", "It is judged in the family 'nvlink_crc'"),
        ("[profiles.lab.fabric.nvlink_crc]\nfail_per_sec = 1", "unknown key. Perhaps you meant 'fail_per_s'?"),
        ("[profiles.lab.fabric.nvlink_crc]\nfail_per_s = -1", "expected a rate ≥ 0 (0: any increase) or false"),
        ("[profiles.lab.fabric.nvlink_crc]\nwarn_per_s = 600", "the warn line (600/s) is above the fail line (500/s)"),
        ("[profiles.lab.fabric.symbol_error]\nfail_per_s = 1\nfail_per_min = 60", "fail_per_s is set too"),
        ('[profiles.lab.fabric.symbol_error]\nsource = ""', "expected what the lines rest on as text"),
    ],
)
def test_a_bad_fabric_table_names_its_key(tmp_path, table, why):
    message = _error(tmp_path, table)
    assert message.startswith("T: profiles.lab.fabric."), message
    assert why in message


def test_a_child_profile_keeps_the_parents_family_tables(tmp_path):
    path = tmp_path / "thresholds.toml"
    text = BASE + '[profiles.lab.fabric.nvlink_crc]\nfail_per_s = 50\n[profiles.child]\nextends = "lab"\n'
    path.write_text(text)
    config = load(path)
    assert config.profile("child").fabric["nvlink_crc"].fail == 50
    assert config.profile("child").fabric["symbol_error"] == DEFAULT_RULES["symbol_error"]


def test_rule_errors_carry_the_key():
    with pytest.raises(RuleError) as info:
        with_overrides({"nvlink_crc": 5}, "profiles.x.fabric")
    assert info.value.key == "profiles.x.fabric.nvlink_crc"


def test_a_counter_no_family_claims_fails_on_any_increase():
    before = snapshot_from_dict(
        {
            "node": "n",
            "time_s": 0,
            "ib_ports": [{"hca": "mlx5_0", "port": 1, "counters": {"new_err": 0}}],
            "gpus": [],
            "nvml_status": "ok",
        }
    )
    after = snapshot_from_dict(
        {
            "node": "n",
            "time_s": 9,
            "ib_ports": [{"hca": "mlx5_0", "port": 1, "counters": {"new_err": 2}}],
            "gpus": [],
            "nvml_status": "ok",
        }
    )
    assert [(f.text, f.severity) for f in fabric.judged(fabric.compare(before, after))] == [
        ("n: new_err +2 on mlx5_0 port 1 over 9 s (fail > 0)", "fail")
    ]


def test_a_crc_rate_at_a_line_says_what_it_means():
    rule = DEFAULT_RULES["nvlink_crc"]
    assert rule.status(250 * 100, 100.0) == "warn"
    assert "sending the data again" in rule.meaning and "NVSwitch port" in rule.meaning

"""thresholds.toml loading: every error names the file and the dotted key, and says what to do."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from pytest_gpucluster.config import load, parse_bytes
from pytest_gpucluster.errors import ConfigError

REPO_THRESHOLDS = Path(__file__).resolve().parents[2] / "thresholds.toml"

BASE = """
[profiles.lab]
executor = "slurm"
partition = "gpu"
nodes = 2
gpus_per_node = 8
gpu_model = "NVIDIA H100 80GB HBM3"

[thresholds.default]
"gpu.temperature" = { unit = "C", fail_above = 85, warn_above = 75 }

[thresholds.h100]
match = ["H100"]
[thresholds.h100.nccl.all_reduce]
intra_node = { unit = "GB/s", fail_below = 330, warn_below = 355 }
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "thresholds.toml"
    path.write_text(textwrap.dedent(text))
    return path


def error_of(tmp_path: Path, text: str) -> str:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load(path)
    return str(info.value).replace(str(path), "T")


def test_repo_thresholds_load_and_every_profile_resolves_a_set():
    config = load(REPO_THRESHOLDS)
    assert {"local", "ci", "testbox", "nebius", "nebius-h200"} <= set(config.profiles)
    nebius = config.profiles["nebius"]
    assert (nebius.partition, nebius.nodes, nebius.gpus_per_node, nebius.shared_fs) == ("gpu", 2, 8, "/mnt/sharedfs")
    assert nebius.ib_hcas == 8 and nebius.ib_rate_gbps == 400
    assert config.profiles["nebius-h200"].partition == "gpu"  # inherited through extends
    assert config.thresholds_for(config.profiles["nebius-h200"])["nccl.all_reduce.intra_node_nvls"].fail_below == 420


def test_model_set_is_chosen_by_gpu_name_and_laid_over_default(tmp_path):
    config = load(write(tmp_path, BASE))
    chosen = config.thresholds_for(config.profiles["lab"])
    assert chosen.name == "h100"
    assert chosen["nccl.all_reduce.intra_node"].fail_below == 330
    assert chosen["gpu.temperature"].fail_above == 85  # from default
    assert config.thresholds_for(config.profiles["lab"], gpu_model="NVIDIA A100").name == "default"


def test_unknown_profile_key_suggests_the_right_one(tmp_path):
    assert error_of(tmp_path, BASE.replace('partition = "gpu"', 'partiton = "gpu"')) == (
        "T: profiles.lab.partiton: unknown key. Perhaps you meant 'partition'?"
    )


def test_wrong_type_names_key_and_value(tmp_path):
    assert error_of(tmp_path, BASE.replace("nodes = 2", 'nodes = "two"')) == (
        "T: profiles.lab.nodes: expected an integer, got 'two'."
    )


def test_unknown_metric_suggests_the_closest(tmp_path):
    text = BASE + '\n[thresholds.default.nccl.all_reduce]\nintra_nod = { unit = "GB/s", fail_below = 1 }\n'
    assert error_of(tmp_path, text) == (
        "T: thresholds.default.nccl.all_reduce.intra_nod: 'nccl.all_reduce.intra_nod' is not a known metric. "
        "Perhaps you meant 'nccl.all_reduce.intra_node'?"
    )


def test_wrong_unit_says_the_right_one(tmp_path):
    assert error_of(tmp_path, BASE.replace('unit = "GB/s"', 'unit = "Gb/s"')) == (
        "T: thresholds.h100.nccl.all_reduce.intra_node.unit: 'Gb/s' is not the unit of "
        'nccl.all_reduce.intra_node; write unit = "GB/s".'
    )


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("nan", "T: thresholds.h100.nccl.all_reduce.intra_node.fail_below: must be a finite number, got nan."),
        ("inf", "T: thresholds.h100.nccl.all_reduce.intra_node.fail_below: must be a finite number, got inf."),
        ("-5", "T: thresholds.h100.nccl.all_reduce.intra_node.fail_below: must not be negative, got -5."),
        ('"fast"', "T: thresholds.h100.nccl.all_reduce.intra_node.fail_below: expected a number, got 'fast'."),
    ],
)
def test_bad_bound_values_are_rejected(tmp_path, value, message):
    assert error_of(tmp_path, BASE.replace("fail_below = 330", f"fail_below = {value}")) == message


def test_bound_on_the_wrong_side_is_rejected(tmp_path):
    assert error_of(tmp_path, BASE.replace("fail_below = 330, warn_below = 355", "fail_above = 330")) == (
        "T: thresholds.h100.nccl.all_reduce.intra_node.fail_above: nccl.all_reduce.intra_node is better "
        "when higher; use fail_below instead."
    )


def test_warn_line_outside_the_fail_line_is_rejected(tmp_path):
    assert error_of(tmp_path, BASE.replace("warn_below = 355", "warn_below = 300")) == (
        "T: thresholds.h100.nccl.all_reduce.intra_node: warn_below (300) is under fail_below (330); "
        "the warn line must sit between pass and fail."
    )


def test_missing_unit(tmp_path):
    assert error_of(tmp_path, BASE.replace('unit = "GB/s", ', "")) == (
        'T: thresholds.h100.nccl.all_reduce.intra_node: missing unit; write unit = "GB/s".'
    )


def test_shell_syntax_in_partition_is_refused(tmp_path):
    assert error_of(tmp_path, BASE.replace('partition = "gpu"', 'partition = "gpu; touch /tmp/x"')) == (
        "T: profiles.lab.partition: 'gpu; touch /tmp/x' is not a Slurm name (letters, digits, '_', '.', '-' only)."
    )


def test_local_executor_is_one_node(tmp_path):
    text = BASE.replace('executor = "slurm"', 'executor = "local"')
    assert error_of(tmp_path, text) == (
        "T: profiles.lab.nodes: the local executor runs on this machine only; set nodes = 1 (got 2)."
    )


def test_bad_executor_lists_choices(tmp_path):
    assert error_of(tmp_path, BASE.replace('executor = "slurm"', 'executor = "k8s"')) == (
        "T: profiles.lab.executor: expected 'slurm' or 'local', got 'k8s'."
    )


def test_unknown_profile_lists_profiles(tmp_path):
    config = load(write(tmp_path, BASE))
    with pytest.raises(ConfigError) as info:
        config.profile("lba")
    assert str(info.value).replace(str(config.path), "T") == (
        "--cluster=lba: no profile [profiles.lba] in T; profiles are: lab. Perhaps you meant 'lab'?"
    )


def test_missing_file_names_the_path(tmp_path):
    with pytest.raises(ConfigError) as info:
        load(tmp_path / "nope.toml")
    assert str(info.value) == f"{tmp_path / 'nope.toml'}: no such file. Pass --gpucluster-thresholds=PATH or create it."


def test_invalid_toml(tmp_path):
    assert error_of(tmp_path, "[profiles.lab\n").startswith("T: not valid TOML: ")


def test_extends_unknown_set(tmp_path):
    assert error_of(tmp_path, BASE + '\n[thresholds.x]\nextends = "h1000"\n') == (
        "T: thresholds.x.extends: no set 'h1000'; sets are: default, h100, x."
    )


def test_sizes_accept_units():
    assert parse_bytes("64MiB", "k") == 64 * 2**20
    assert parse_bytes("1GB", "k") == 10**9
    assert parse_bytes(4096, "k") == 4096
    with pytest.raises(ConfigError, match=r"k: '64 parsecs' is not a size; write e.g. 64MiB, 1GiB or 1048576."):
        parse_bytes("64 parsecs", "k")


def test_nccl_sizes_must_be_ordered(tmp_path):
    text = BASE + '\n[profiles.lab.nccl]\nmin_bytes = "1GiB"\nmax_bytes = "1MiB"\n'
    assert error_of(tmp_path, text) == ("T: profiles.lab.nccl: need 0 < min_bytes ≤ judge_from_bytes ≤ max_bytes.")


@pytest.mark.parametrize(
    ("key", "value", "why"),
    [
        ("grad_accum", 0, "must be at least 1, got 0."),
        ("micro_batch", -2, "must be at least 1, got -2."),
        ("warmup_steps", -1, "must be 0 or more, got -1."),
    ],
)
def test_training_sizes_must_be_positive(tmp_path, key, value, why):
    text = BASE + f"\n[profiles.lab.training]\n{key} = {value}\n"
    assert error_of(tmp_path, text) == f"T: profiles.lab.training.{key}: {why}"


def test_profile_sdc_sizes_and_fabric_settings_load(tmp_path):
    text = (
        BASE.replace("nodes = 2\n", 'nodes = 2\nfabric_sysfs_root = "/tmp/ib"\n')
        + """
[profiles.lab.sdc]
n = 4096
chain = 64
[profiles.lab.fabric.rnr_nak_retry_err]
fail_per_s = 1
"""
    )
    profile = load(write(tmp_path, text)).profile("lab")
    assert (profile.sdc.n, profile.sdc.chain, profile.sdc.dtype) == (4096, 64, "float32")
    assert profile.fabric_sysfs_root == "/tmp/ib" and profile.fabric["rnr_nak_retry_err"].fail == 1


@pytest.mark.parametrize(
    ("table", "why"),
    [
        (
            "[profiles.lab.fabric_bounds]\nsymbol_error = 3",
            "profiles.lab.fabric_bounds: no longer read: an absolute bound over a run means nothing without its "
            "length. Counters are judged by family and rate: set [profiles.lab.fabric.FAMILY] (here: symbol_error) "
            "with warn_per_s / fail_per_s (or _per_min; 0: any increase; false: no line). See docs/thresholds.md.",
        ),
        (
            'fabric_sysfs_root = "sys/class"',
            "profiles.lab.fabric_sysfs_root: expected an absolute path on the nodes, got 'sys/class'.",
        ),
        (
            "[profiles.lab.sdc]\nchain = 0",
            "profiles.lab.sdc: sdc sizes n=8192, chain=0, samples=8: all must be ≥ 1, n ≥ 2.",
        ),
        (
            '[profiles.lab.sdc]\ndtype = "float16"',
            "profiles.lab.sdc: sdc dtype 'float16': expected one of float32, float64, bfloat16.",
        ),
        (
            "[profiles.lab.sdc]\nblock_elements = 8",
            "profiles.lab.sdc.block_elements: unknown key. Known keys: n, chain, seed, dtype.",
        ),
    ],
)
def test_bad_sdc_and_fabric_settings_name_the_key(tmp_path, table, why):
    text = BASE.replace("nodes = 2\n", f"nodes = 2\n{table}\n") if table.startswith("fabric_") else BASE + table
    assert error_of(tmp_path, text + "\n") == f"T: {why}"


def test_reservation_qos_and_constraint_are_profile_keys(tmp_path):
    text = BASE.replace('partition = "gpu"', 'partition = "gpu"\nreservation = "handover"\nqos = "acceptance"\n')
    text = text.replace("nodes = 2", 'nodes = 2\nconstraint = "h100&(ib|roce)"\nexclusive = false')
    profile = load(write(tmp_path, text)).profile("lab")
    assert (profile.reservation, profile.qos, profile.constraint) == ("handover", "acceptance", "h100&(ib|roce)")
    assert profile.exclusive is False
    assert load(write(tmp_path, BASE)).profile("lab").exclusive is True  # measuring jobs: whole nodes


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ('reservation = "maint; touch x"', "profiles.lab.reservation: 'maint; touch x' is not a Slurm name"),
        ('constraint = "h100*2"', "profiles.lab.constraint: 'h100*2': a count cannot be judged node by node"),
        ('constraint = "(h100"', "profiles.lab.constraint: '(h100': '(' is never closed."),
        (
            'sbatch_extra = { reservation = "maint" }',
            "profiles.lab.sbatch_extra.reservation: write `reservation = ...` in the profile instead",
        ),
        (
            'sbatch_extra = { constraint = "h100" }',
            "profiles.lab.sbatch_extra.constraint: write `constraint = ...` in the profile instead",
        ),
        ('sbatch_extra = { time = "5" }', "profiles.lab.sbatch_extra.time: the run sets --time for each job"),
    ],
)
def test_reservation_and_constraint_mistakes_name_the_key(tmp_path, line, message):
    assert message in error_of(tmp_path, BASE.replace('partition = "gpu"', f'partition = "gpu"\n{line}'))

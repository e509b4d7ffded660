"""Reading thresholds.toml: ``load`` checks every key and value and returns a frozen ``Config``.

The file holds two kinds of table, ``[profiles.NAME]`` (config/profile.py) and
``[thresholds.SET]`` (config/thresholds.py); either may name another of its kind in ``extends``
and take over what it does not set; ``[soak.rules.NAME]`` holds the soak's rules and
``[soak.cpu_rules.NAME]`` the keys that differ for CPU ranks standing in (config/soak.py).
It is read once, before any job exists. Every error names the file and the dotted key and says how
to fix it; unknown keys are answered with the closest known one.
"""

from __future__ import annotations

import difflib
import re
import tomllib
import types
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_gpucluster.config import features
from pytest_gpucluster.config.fabric_rules import FAMILY_OF, RuleError, with_overrides
from pytest_gpucluster.config.metrics import METRICS, Metric
from pytest_gpucluster.config.profile import PROFILE_KEYS, Profile, across_nodes
from pytest_gpucluster.config.soak import SoakRules
from pytest_gpucluster.config.tables import build, reject_unknown, resolve_extends
from pytest_gpucluster.config.threshold_tables import threshold_sets
from pytest_gpucluster.config.thresholds import Threshold, ThresholdSet, choose_set, no_set_for
from pytest_gpucluster.config.topology import Topology, TopologyError, read_topology
from pytest_gpucluster.errors import ConfigError

# Slurm's own names for partitions, accounts and nodes; anything else is refused so a config value
# can never smuggle shell syntax into an sbatch script.
SLURM_NAME = re.compile(r"^[A-Za-z0-9_.\-]+$")
_SLURM_NODELIST = re.compile(r"^[A-Za-z0-9_.\-\[\],]+$")
_SBATCH_OPTION = re.compile(r"^[a-z][a-z0-9\-]*$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
NCCL_ALGOS = ("Ring", "Tree", "CollNetDirect", "CollNetChain", "NVLS", "NVLSTree", "PAT")
# sbatch options that are profile keys: in sbatch_extra they would bypass what the run knows of
# them (the reservation's and the constraint's nodes are the ones it picks).
_PROFILE_KEY_OF = {
    "partition": "partition",
    "account": "account",
    "qos": "qos",
    "reservation": "reservation",
    "constraint": "constraint",
    "exclusive": "exclusive",
    "nodelist": "nodelist",
}
# sbatch options the run sets for each job from its declared shape.
_SET_PER_JOB = frozenset(
    {"job-name", "time", "nodes", "ntasks-per-node", "gpus-per-node", "gpus-per-task", "gpus", "gres"}
    | {"cpus-per-task", "mem", "output", "error", "open-mode", "signal", "wrap"}
)
# Profile tables that replace the inherited one whole under ``extends`` instead of being merged.
_REPLACED_WHOLE = ("env", "sbatch_extra")
# The soak's rule tables: [soak.rules.RULE] for GPUs, [soak.cpu_rules.RULE] the keys that differ
# for CPU ranks standing in.
SOAK_TABLES = ("rules", "cpu_rules")


@dataclass(frozen=True)
class Config:
    """Everything thresholds.toml says."""

    path: Path
    profiles: Mapping[str, Profile]
    threshold_sets: Mapping[str, Mapping[str, Threshold]]
    matches: Mapping[str, tuple[str, ...]]
    metrics: Mapping[str, Metric] = field(default_factory=lambda: types.MappingProxyType(METRICS))  # with the site's
    shapes: Mapping[str, int | None] = field(default_factory=dict)  # set → GPUs per node its lines fit

    def profile(self, name: str, option: str = "--cluster") -> Profile:
        """The profile called ``name``; an unknown name lists the known ones."""
        if name not in self.profiles:
            guess = difflib.get_close_matches(name, list(self.profiles), n=1)
            hint = f" Perhaps you meant '{guess[0]}'?" if guess else ""
            raise ConfigError(
                f"{option}={name}: no profile [profiles.{name}] in {self.path}; "
                f"profiles are: {', '.join(sorted(self.profiles))}.{hint}"
            )
        return self.profiles[name]

    def thresholds_for(
        self, profile: Profile, gpu_model: str | None = None, gpus_per_node: int | None = None
    ) -> ThresholdSet:
        """The set that applies to ``profile`` whose nodes' jobs see ``gpus_per_node`` GPUs of
        ``gpu_model`` (see ``choose_set``)."""
        return choose_set(
            self.threshold_sets,
            self.matches,
            profile,
            gpu_model,
            str(self.path),
            shapes=self.shapes,
            gpus_per_node=gpus_per_node if gpus_per_node is not None else profile.gpus_per_node,
        )

    def no_set_for(self, profile: Profile) -> str | None:
        """Why no threshold set applies to the GPU model ``profile`` names, or None (``no_set_for``)."""
        return no_set_for(str(self.path), profile, self.matches)


def load(path: Path) -> Config:
    """Read and check ``path``; raises ConfigError naming file, key and fix."""
    file = str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{file}: no such file. Pass --gpucluster-thresholds=PATH or create it.") from None
    except OSError as exc:
        raise ConfigError(f"{file}: cannot be read ({exc.strerror}).") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{file}: not valid TOML: {exc}.") from None
    reject_unknown(data, ("profiles", "thresholds", "metrics", "soak"), "(top level)", file)
    catalogue = {**METRICS, **_site_metrics(data.get("metrics", {}), file)}
    soak = data.get("soak", {})
    if not isinstance(soak, dict):
        raise ConfigError(f"{file}: soak: expected [soak.rules.NAME] and [soak.cpu_rules.NAME] tables.")
    reject_unknown(soak, SOAK_TABLES, "soak", file)
    top = {name: _rule_tables(soak.get(name, {}), f"soak.{name}", file) for name in SOAK_TABLES}
    # Checked once here, so an error names the file's own table rather than a profile's.
    _rules(file, "soak.rules", ("soak.rules", top["rules"]))
    _rules(file, "soak.cpu_rules", ("soak.rules", top["rules"]), ("soak.cpu_rules", top["cpu_rules"]))
    profiles = _profiles(data.get("profiles", {}), file, top)
    sets, matches, shapes = threshold_sets(data.get("thresholds", {}), file, catalogue)
    for name, profile in profiles.items():
        if profile.thresholds is not None and profile.thresholds not in sets:
            raise ConfigError(
                f"{file}: profiles.{name}.thresholds: no set [thresholds.{profile.thresholds}]; "
                f"sets are: {', '.join(sorted(sets)) or '(none)'}."
            )
    return Config(
        path=path,
        profiles=types.MappingProxyType(profiles),
        threshold_sets=types.MappingProxyType(sets),
        matches=types.MappingProxyType(matches),
        metrics=types.MappingProxyType(catalogue),
        shapes=types.MappingProxyType(shapes),
    )


SITE_PREFIX = "site."
_METRIC_KEYS = ("unit", "better", "description", "calibrate")


def _site_metrics(raw: Any, file: str) -> dict[str, Metric]:
    """``[metrics."site.NAME"]`` tables: metrics a site's own checks judge, named ``site.*`` so they
    never shadow the suite's, each with its unit and which direction is better."""
    if not isinstance(raw, dict):
        raise ConfigError(f'{file}: metrics: expected tables such as [metrics."site.my_check.speed"].')
    out: dict[str, Metric] = {}
    for name, table in raw.items():
        where = f'metrics."{name}"'
        if not name.startswith(SITE_PREFIX) or name == SITE_PREFIX:
            raise ConfigError(
                f"{file}: {where}: a site's metric is named {SITE_PREFIX}<check>.<quantity>, "
                f"so it never shadows one of the suite's; rename it {SITE_PREFIX}{name}."
            )
        if not isinstance(table, dict):
            raise ConfigError(f"{file}: {where}: expected a table with unit, better and description.")
        reject_unknown(table, _METRIC_KEYS, where, file)
        unit, better = table.get("unit"), table.get("better")
        if not isinstance(unit, str) or not unit:
            raise ConfigError(f'{file}: {where}.unit: expected the unit as text, e.g. unit = "GB/s".')
        if better not in ("higher", "lower"):
            raise ConfigError(f'{file}: {where}.better: expected "higher" or "lower", got {better!r}.')
        calibrate = table.get("calibrate", False)
        if not isinstance(calibrate, bool):
            raise ConfigError(
                f"{file}: {where}.calibrate: expected true (--gpucluster-calibrate may write its bounds) or false, "
                f"got {calibrate!r}."
            )
        out[name] = Metric(name, unit, better, str(table.get("description", "")), calibrate)
    return out


# --------------------------------------------------------------------------- profiles


def _profiles(raw: Mapping[str, Any], file: str, soak_rules: Mapping[str, Mapping[str, Any]]) -> dict[str, Profile]:
    if not raw:
        raise ConfigError(f"{file}: no [profiles.NAME] table; define at least one profile.")

    def parent_of(name: str) -> str | None:
        table = raw[name]
        if not isinstance(table, dict):
            raise ConfigError(f"{file}: profiles.{name}: expected a table.")
        parent = table.get("extends")
        if parent is not None and not isinstance(parent, str):
            raise ConfigError(f"{file}: profiles.{name}.extends: expected the name of another profile.")
        return parent

    def merge(parent: dict[str, Any], own: dict[str, Any]) -> dict[str, Any]:
        # Nested tables ([nccl], [training], ...) are merged one level; env and sbatch_extra
        # are taken whole from whichever profile sets them.
        merged = {key: dict(value) if isinstance(value, dict) else value for key, value in parent.items()}
        for key, value in own.items():
            if key == "extends":
                continue
            if isinstance(value, dict) and isinstance(merged.get(key), dict) and key not in _REPLACED_WHOLE:
                merged[key].update(value)
            else:
                merged[key] = value
        return merged

    profiles: dict[str, Profile] = {}
    for name, table in resolve_extends(raw, parent_of, merge, "profiles", "profile", file).items():
        where = f"profiles.{name}"
        table = dict(table)
        fabric = _fabric_rules(table, where, file)
        rules, cpu_rules = _soak_rules(table, soak_rules, where, file)
        topology = _topology(table, where, file)
        profile = build(
            Profile,
            table,
            where,
            file,
            settable=PROFILE_KEYS,
            name=name,
            soak_rules=rules,
            soak_cpu_rules=cpu_rules,
            topology=topology,
            **fabric,
        )
        _check_profile(profile, where, file)
        profiles[name] = profile
    return profiles


def _fabric_rules(table: dict[str, Any], where: str, file: str) -> dict[str, Any]:
    """The profile's ``fabric`` tables laid over the suite's rules (taken out of ``table``), as
    ``build``'s given field; the retired ``fabric_bounds`` is refused saying what replaces it."""
    if "fabric_bounds" in table:
        bounds = table["fabric_bounds"] if isinstance(table["fabric_bounds"], dict) else {}
        families = sorted({FAMILY_OF.get(str(c), str(c)) for c in bounds})
        example = f" (here: {', '.join(families)})" if families else ""
        raise ConfigError(
            f"{file}: {where}.fabric_bounds: no longer read: an absolute bound over a run means nothing "
            f"without its length. Counters are judged by family and rate: set [{where}.fabric.FAMILY]{example} "
            "with warn_per_s / fail_per_s (or _per_min; 0: any increase; false: no line). See docs/thresholds.md."
        )
    if "fabric" not in table:
        return {}
    try:
        return {"fabric": with_overrides(table.pop("fabric"), f"{where}.fabric", file)}
    except RuleError as exc:
        raise ConfigError(f"{file}: {exc}") from None


def _topology(table: dict[str, Any], where: str, file: str) -> Topology | None:
    """The tree ``topology_file`` names, read now (its path, relative to thresholds.toml, is
    written back into ``table`` resolved); an error names both files, the line and the key."""
    value = table.get("topology_file")
    if value is None:
        return None
    key = f"{where}.topology_file"
    if not isinstance(value, str) or not value:
        raise ConfigError(
            f"{file}: {key}: expected the path of a topology.conf or of saved `scontrol show topology` output."
        )
    path = Path(file).parent / value
    table["topology_file"] = str(path)
    try:
        return read_topology(path)
    except FileNotFoundError:
        raise ConfigError(f"{file}: {key}: {path}: no such file.") from None
    except OSError as exc:
        raise ConfigError(f"{file}: {key}: {path}: cannot be read ({exc.strerror}).") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{file}: {key}: {path}: not a text file.") from None
    except TopologyError as exc:
        end = "" if str(exc).endswith((".", "?")) else "."
        raise ConfigError(f"{file}: {key}: {path}: {exc}{end}") from None


def _rule_tables(value: Any, where: str, file: str) -> dict[str, dict[str, Any]]:
    """``[WHERE.RULE]`` tables as read (a copy); anything else is refused naming ``where``."""
    if not isinstance(value, dict):
        raise ConfigError(f"{file}: {where}: expected [{where}.RULE] tables.")
    for name, rule in value.items():
        if not isinstance(rule, dict):
            raise ConfigError(f"{file}: {where}.{name}: expected a table [{where}.{name}], got {rule!r}.")
    return {name: dict(rule) for name, rule in value.items()}


def _rules(file: str, where: str, *layers: tuple[str, Mapping[str, Mapping[str, Any]]]) -> SoakRules:
    """``SoakRules`` from rule tables laid over each other, the first at the bottom: each rule's
    keys from the last table that sets them, and the tables that set any named with it (the last
    first). ``where`` names the top table in an error."""
    merged: dict[str, dict[str, Any]] = {}
    tables: dict[str, tuple[str, ...]] = {}
    for prefix, layer in layers:
        for name, rule in layer.items():
            merged.setdefault(name, {}).update(rule)
            tables[name] = (f"{prefix}.{name}", *tables.get(name, ()))
    built: SoakRules = build(
        SoakRules, merged, where, file, settable={}, tables=types.MappingProxyType(tables), path=file
    )
    return built


def _soak_rules(
    table: dict[str, Any], top: Mapping[str, Mapping[str, Any]], where: str, file: str
) -> tuple[SoakRules, SoakRules]:
    """The rules for GPUs and for CPU ranks standing in (both tables taken out of ``table``).
    GPUs: ``[soak.rules]``, then the profile's ``[profiles.NAME.soak.rules.RULE]``. CPU ranks:
    the profile's GPU rules, then ``[soak.cpu_rules]``, then the profile's
    ``[profiles.NAME.soak.cpu_rules.RULE]``; the later table wins a key. A profile whose GPUs are
    only GRES (its ranks always CPU stand-ins) may not set a GPU key the CPU table overrides: it
    would never apply."""
    own: dict[str, Any] = {}
    if isinstance(table.get("soak"), dict):
        table["soak"] = dict(table["soak"])  # a copy: the file's own table stays as read
        own = {name: table["soak"].pop(name) for name in SOAK_TABLES if name in table["soak"]}
    mine = {name: _rule_tables(own.get(name, {}), f"{where}.soak.{name}", file) for name in SOAK_TABLES}
    gpu_layers = (("soak.rules", top["rules"]), (f"{where}.soak.rules", mine["rules"]))
    cpu_layers = (("soak.cpu_rules", top["cpu_rules"]), (f"{where}.soak.cpu_rules", mine["cpu_rules"]))
    gpus = _rules(file, f"{where}.soak.rules", *gpu_layers)
    try:
        cpus = _rules(file, f"{where}.soak.cpu_rules", *gpu_layers, *cpu_layers)
    except ConfigError as exc:  # the keys fit the GPU rules but not those for CPU ranks
        raise ConfigError(
            f"{exc} (CPU ranks standing in are judged by [soak.cpu_rules] and [{where}.soak.cpu_rules] laid "
            "over this profile's GPU rules.)"
        ) from None
    if table.get("gpus_are_real") is False:
        for name, rule in mine["rules"].items():
            hidden = sorted(set(rule) & set(top["cpu_rules"].get(name, {})) - set(mine["cpu_rules"].get(name, {})))
            if hidden:
                raise ConfigError(
                    f"{file}: {where}.soak.rules.{name}: {', '.join(hidden)} would never apply: this profile's ranks "
                    f"are CPU stand-ins (gpus_are_real = false), judged by [soak.cpu_rules.{name}], which sets it. "
                    f"Set it in [{where}.soak.cpu_rules.{name}]."
                )
    return gpus, cpus


def _check_profile(p: Profile, where: str, file: str) -> None:
    def bad(key: str, why: str) -> ConfigError:
        return ConfigError(f"{file}: {where}.{key}: {why}")

    for key in ("partition", "account", "qos", "reservation"):
        value = getattr(p, key)
        if value is not None and not SLURM_NAME.match(value):
            raise bad(key, f"{value!r} is not a Slurm name (letters, digits, '_', '.', '-' only).")
    if p.constraint is not None:
        try:
            features.parse(p.constraint)
        except ValueError as exc:
            raise bad("constraint", f"{p.constraint!r}: {exc}.") from None
    for node in p.nodelist:
        if not _SLURM_NODELIST.match(node):
            raise bad("nodelist", f"{node!r} is not a Slurm node name.")
    for key, value in p.sbatch_extra.items():
        if not _SBATCH_OPTION.match(key) or "\n" in value:
            raise bad(f"sbatch_extra.{key}", "expected a long sbatch option name and a one-line value.")
        if key in _PROFILE_KEY_OF:
            raise bad(
                f"sbatch_extra.{key}",
                f"write `{_PROFILE_KEY_OF[key]} = ...` in the profile instead: the run picks its nodes and "
                "states its jobs by it.",
            )
        if key in _SET_PER_JOB:
            raise bad(f"sbatch_extra.{key}", f"the run sets --{key} for each job from its shape; leave it out.")
    for key, value in p.env.items():
        if not _ENV_NAME.match(key) or "\n" in value or "\0" in value:
            raise bad(f"env.{key}", "expected an environment variable name and a one-line value.")
    positive = {"nodes": p.nodes, "job_timeout_min": p.job_timeout_min, "queue_timeout_s": p.queue_timeout_s}
    for key, number in positive.items():
        if number < 1:
            raise bad(key, f"must be at least 1, got {number}.")
    if p.slurm_retry_s < 0:
        raise bad("slurm_retry_s", f"must not be negative (0: no retry), got {p.slurm_retry_s}.")
    if p.gpus_per_node is not None and p.gpus_per_node < 0:
        raise bad("gpus_per_node", f"must not be negative, got {p.gpus_per_node}.")
    if p.ib_hcas < 0 or p.ib_rate_gbps <= 0:
        raise bad("ib_hcas", "ib_hcas must be ≥ 0 and ib_rate_gbps > 0.")
    if p.executor == "local" and p.nodes != 1:
        raise bad("nodes", f"the local executor runs on this machine only; set nodes = 1 (got {p.nodes}).")
    if p.executor == "slurm" and p.gpus_per_node is None:
        raise bad("gpus_per_node", "a slurm profile must say how many GPUs each node has (0 for none).")
    if p.nodelist and len(p.nodelist) != p.nodes:
        raise bad("nodelist", f"lists {len(p.nodelist)} nodes but nodes = {p.nodes}.")
    n = p.nccl
    if not 0 < n.min_bytes <= n.judge_from_bytes <= n.max_bytes:
        raise bad("nccl", "need 0 < min_bytes ≤ judge_from_bytes ≤ max_bytes.")
    for key, ops in (("nccl.ops", n.ops), ("nccl_across.ops", p.nccl_across.ops or ())):
        for op in ops:
            if not any(m.startswith(f"nccl.{op}.inter_node") for m in METRICS):
                known = sorted({m.split(".")[1] for m in METRICS if m.endswith(".inter_node")})
                raise bad(key, f"unknown collective {op!r}; known: {', '.join(known)}.")
    if n.iters < 1 or n.warmup_iters < 0 or n.retries < 0 or n.timeout_s < 1:
        raise bad("nccl", "iters ≥ 1, warmup_iters ≥ 0, retries ≥ 0 and timeout_s ≥ 1 are required.")
    a = across_nodes(p)
    if not 0 < a.min_bytes <= a.judge_from_bytes <= a.max_bytes:
        taken = [k for k in ("min_bytes", "judge_from_bytes", "max_bytes") if getattr(p.nccl_across, k) is None]
        inherited = f" ({', '.join(taken)} taken from [nccl])" if taken else ""
        raise bad("nccl_across", f"need 0 < min_bytes ≤ judge_from_bytes ≤ max_bytes{inherited}.")
    if a.iters < 1 or a.warmup_iters < 0 or a.retries < 0 or a.timeout_s < 1:
        raise bad("nccl_across", "iters ≥ 1, warmup_iters ≥ 0, retries ≥ 0 and timeout_s ≥ 1 are required.")
    at_once = p.nccl_across.groups_at_once
    if at_once is not None and at_once < 1:
        raise bad("nccl_across.groups_at_once", f"at least 1 group a job; got {at_once}.")
    for key in ("inter_node_fail_fraction", "inter_node_warn_fraction"):
        fraction = getattr(n, key)
        if not 0 < fraction <= 1:
            raise bad(f"nccl.{key}", f"a fraction of the fabric's line rate, 0 < f ≤ 1; got {fraction:g}.")
    if n.inter_node_warn_fraction < n.inter_node_fail_fraction:
        raise bad(
            "nccl.inter_node_warn_fraction",
            f"{n.inter_node_warn_fraction:g} is under inter_node_fail_fraction "
            f"({n.inter_node_fail_fraction:g}); the warn line must sit between pass and fail.",
        )
    _check_algo(n.inter_node_algo, lambda why: bad("nccl.inter_node_algo", why))
    for key in ("nvbandwidth_path", "ib_write_bw_path"):
        value = getattr(p, key)
        if value is not None and (not value.startswith("/") or "\n" in value or "\0" in value):
            raise bad(key, f"expected the absolute path of the binary on the nodes, got {value!r}.")
    for key in ("nvbandwidth_timeout_s", "ib_write_bw_timeout_s"):
        if getattr(p, key) < 1:
            raise bad(key, f"must be at least 1, got {getattr(p, key)}.")
    if not p.fabric_sysfs_root.startswith("/"):
        raise bad("fabric_sysfs_root", f"expected an absolute path on the nodes, got {p.fabric_sysfs_root!r}.")
    t = p.training
    sizes = ("d_model", "n_layers", "n_heads", "seq_len", "vocab", "micro_batch", "grad_accum", "steps", "timeout_s")
    for key in (*sizes, "stability_steps"):
        if getattr(t, key) < 1:
            raise bad(f"training.{key}", f"must be at least 1, got {getattr(t, key)}.")
    if t.warmup_steps < 0:
        raise bad("training.warmup_steps", f"must be 0 or more, got {t.warmup_steps}.")


def _check_algo(value: str, bad: Callable[[str], ConfigError]) -> None:
    """``auto`` or an NCCL_ALGO list (``Ring``, ``Tree,Ring``, ``^NVLS``): NCCL's algorithm names."""
    if value == "auto":
        return
    known = {a.lower(): a for a in NCCL_ALGOS}
    names = value.removeprefix("^").split(",")
    for name in names:
        if name.strip().lower() not in known:
            guess = difflib.get_close_matches(name.strip(), [*NCCL_ALGOS, "auto"], n=1)
            hint = f" Perhaps you meant '{guess[0]}'?" if guess else ""
            raise bad(
                f'{name.strip()!r} is not an NCCL algorithm; write "auto" or a list of '
                f'{", ".join(NCCL_ALGOS)} ("^" first excludes them).{hint}'
            )

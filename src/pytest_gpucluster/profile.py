"""thresholds.toml → frozen dataclasses.

The file holds two kinds of table:

* ``[profiles.NAME]``: how to reach a cluster and what it should look like;
* ``[thresholds.SET]``: the numbers every check is judged by, one set per GPU model
  (``match`` lists NVML name fragments) plus a ``default`` set every other set falls back on.

It is read once, before any job exists. Every error names the file and the dotted key and says
how to fix it; unknown keys are answered with the closest known one.
"""

from __future__ import annotations

import difflib
import math
import re
import tomllib
import types
import typing
from collections.abc import Mapping
from dataclasses import MISSING, dataclass, field, fields, is_dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from pytest_gpucluster.errors import ConfigError
from pytest_gpucluster.metrics import METRICS

# Slurm's own names for partitions, accounts and nodes; anything else is refused so a config value
# can never smuggle shell syntax into an sbatch script.
_SLURM_NAME = re.compile(r"^[A-Za-z0-9_.\-]+$")
_SLURM_NODELIST = re.compile(r"^[A-Za-z0-9_.\-\[\],]+$")
_SBATCH_OPTION = re.compile(r"^[a-z][a-z0-9\-]*$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]i?B|B)?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12,
          "KIB": 2**10, "MIB": 2**20, "GIB": 2**30, "TIB": 2**40}  # fmt: skip


def parse_bytes(value: int | str, where: str) -> int:
    """``"64MiB"``, ``"1GB"`` or a plain integer → bytes; ``where`` names the key on error."""
    if isinstance(value, bool):
        raise ConfigError(f"{where}: expected a size such as 64MiB, got {value!r}.")
    if isinstance(value, int):
        if value < 0:
            raise ConfigError(f"{where}: a size cannot be negative, got {value}.")
        return value
    match = _SIZE.match(value)
    if not match:
        raise ConfigError(f"{where}: {value!r} is not a size; write e.g. 64MiB, 1GiB or 1048576.")
    number, unit = match.groups()
    return int(float(number) * _UNITS[(unit or "").upper()])


# A byte count that thresholds.toml may write as "64MiB".
Bytes = Annotated[int, "bytes"]

# --------------------------------------------------------------------------- thresholds


@dataclass(frozen=True)
class Threshold:
    """Pass/warn/fail lines for one metric. Only the side matching the metric's direction is set."""

    metric: str
    unit: str
    fail_below: float | None = None
    warn_below: float | None = None
    fail_above: float | None = None
    warn_above: float | None = None
    xfail: str | None = None
    source: str = ""

    def describe(self) -> str:
        """The bounds as a short phrase, e.g. ``fail < 350 GB/s, warn < 400 GB/s``."""
        parts = []
        if self.fail_below is not None:
            parts.append(f"fail < {self.fail_below:g} {self.unit}")
        if self.warn_below is not None:
            parts.append(f"warn < {self.warn_below:g} {self.unit}")
        if self.fail_above is not None:
            parts.append(f"fail > {self.fail_above:g} {self.unit}")
        if self.warn_above is not None:
            parts.append(f"warn > {self.warn_above:g} {self.unit}")
        return ", ".join(parts) or "no bound"


@dataclass(frozen=True)
class ThresholdSet:
    """The thresholds in force for one run: the model's set laid over ``default``."""

    name: str
    values: Mapping[str, Threshold]
    file: str = "thresholds.toml"

    def __getitem__(self, metric: str) -> Threshold:
        try:
            return self.values[metric]
        except KeyError:
            raise ConfigError(
                f"{self.file}: no threshold for {metric!r} in set {self.name!r} nor in 'default'; "
                f"add [thresholds.default.{metric}] with unit = \"{METRICS[metric].unit}\" "
                "and its bounds."
                if metric in METRICS
                else f"{metric!r} is not a known metric."
            ) from None

    def get(self, metric: str) -> Threshold | None:
        """The threshold for ``metric``, or None when neither the set nor default has one."""
        return self.values.get(metric)


_THRESHOLD_KEYS = ("unit", "fail_below", "warn_below", "fail_above", "warn_above", "xfail")


def _threshold(metric: str, table: Mapping[str, Any], where: str, file: str) -> Threshold:
    spec = METRICS[metric]
    _reject_unknown(table, _THRESHOLD_KEYS, where, file)
    unit = table.get("unit")
    if unit is None:
        raise ConfigError(f'{file}: {where}: missing unit; write unit = "{spec.unit}".')
    if unit != spec.unit:
        raise ConfigError(
            f'{file}: {where}.unit: {unit!r} is not the unit of {metric}; write unit = "{spec.unit}".'
        )
    bounds: dict[str, float] = {}
    for key in ("fail_below", "warn_below", "fail_above", "warn_above"):
        if key not in table:
            continue
        value = table[key]
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigError(f"{file}: {where}.{key}: expected a number, got {value!r}.")
        if not math.isfinite(value):
            raise ConfigError(f"{file}: {where}.{key}: must be a finite number, got {value!r}.")
        if value < 0:
            raise ConfigError(f"{file}: {where}.{key}: must not be negative, got {value!r}.")
        bounds[key] = float(value)
    wrong_side = ("fail_above", "warn_above") if spec.better == "higher" else ("fail_below", "warn_below")
    for key in wrong_side:
        if key in bounds:
            good = "higher" if spec.better == "higher" else "lower"
            right = key.replace("above", "below") if spec.better == "higher" else key.replace("below", "above")
            raise ConfigError(
                f"{file}: {where}.{key}: {metric} is better when {good}; use {right} instead."
            )
    if not bounds:
        raise ConfigError(
            f"{file}: {where}: no bound given; set "
            + ("fail_below (and optionally warn_below)." if spec.better == "higher"
               else "fail_above (and optionally warn_above).")
        )  # fmt: skip
    if "fail_below" in bounds and "warn_below" in bounds and bounds["warn_below"] < bounds["fail_below"]:
        raise ConfigError(
            f"{file}: {where}: warn_below ({bounds['warn_below']:g}) is under fail_below "
            f"({bounds['fail_below']:g}); the warn line must sit between pass and fail."
        )
    if "fail_above" in bounds and "warn_above" in bounds and bounds["warn_above"] > bounds["fail_above"]:
        raise ConfigError(
            f"{file}: {where}: warn_above ({bounds['warn_above']:g}) is over fail_above "
            f"({bounds['fail_above']:g}); the warn line must sit between pass and fail."
        )
    xfail = table.get("xfail")
    if xfail is not None and not isinstance(xfail, str):
        raise ConfigError(f"{file}: {where}.xfail: expected a reason (a string), got {xfail!r}.")
    return Threshold(metric=metric, unit=unit, xfail=xfail, source=f"{file} [{where}]", **bounds)


def _flatten_thresholds(
    table: Mapping[str, Any], prefix: str, where: str, file: str, out: dict[str, Threshold]
) -> None:
    for key, value in table.items():
        name = f"{prefix}.{key}" if prefix else key
        here = f"{where}.{key}"
        if not isinstance(value, dict):
            raise ConfigError(
                f"{file}: {here}: expected a table of bounds (unit, fail_below, ...), got {value!r}."
            )
        if name in METRICS:
            out[name] = _threshold(name, value, here, file)
        elif any(m.startswith(name + ".") for m in METRICS):
            _flatten_thresholds(value, name, here, file, out)
        else:
            guess = difflib.get_close_matches(name, list(METRICS), n=1)
            hint = f" Perhaps you meant '{guess[0]}'?" if guess else ""
            raise ConfigError(f"{file}: {here}: {name!r} is not a known metric.{hint}")


# --------------------------------------------------------------------------- profiles


@dataclass(frozen=True)
class NcclSettings:
    """How the collective sweep runs (sizes are whole buffers, as nccl-tests counts them)."""

    ops: tuple[str, ...] = ("all_reduce", "all_gather", "reduce_scatter")
    min_bytes: Bytes = 2**20
    max_bytes: Bytes = 8 * 2**30
    judge_from_bytes: Bytes = 2**30
    warmup_iters: int = 5
    iters: int = 20
    timeout_s: int = 600
    retries: int = 1
    nvls: bool = False
    nccl_tests_dir: str | None = None
    # NCCL_ALGO of the across-node sweeps: Ring makes busbw the network's (tree and NVLS-tree
    # algorithms over few nodes read above it); "auto" leaves the choice to NCCL.
    inter_node_algo: str = "Ring"
    # Where the derived across-node lines sit, as fractions of the fabric's line rate (see
    # derived_inter_node and docs/thresholds.md).
    inter_node_fail_fraction: float = 0.75
    inter_node_warn_fraction: float = 0.85


@dataclass(frozen=True)
class TrainingSettings:
    """The GPT-style model the training checks run."""

    d_model: int = 2048
    n_layers: int = 16
    n_heads: int = 16
    seq_len: int = 2048
    vocab: int = 32000
    micro_batch: int = 12  # 55 GiB peak under DDP (fits 80 GB); 4 left an H200 at 51 % MFU
    grad_accum: int = 2  # micro-batches per optimiser step (gradients reduced once per step)
    steps: int = 10
    warmup_steps: int = 3
    compile: bool = False
    timeout_s: int = 900


@dataclass(frozen=True)
class ComputeSettings:
    """Per-GPU compute and memory probes."""

    matmul_n: int = 8192
    matmul_iters: int = 50
    copy_bytes: Bytes = 4 * 2**30
    copy_iters: int = 20
    burn_s: int = 120


@dataclass(frozen=True)
class Profile:
    """How to reach one cluster and what it should look like."""

    name: str
    executor: Literal["slurm", "local"] = "slurm"
    description: str = ""
    partition: str | None = None
    account: str | None = None
    nodes: int = 1
    nodelist: tuple[str, ...] = ()
    gpus_per_node: int | None = None  # None: as many as NVML finds (local only)
    # False: GPUs exist only as Slurm GRES (the project's test cluster); jobs then run every
    # workload on the CPU path (gloo), also on a host that has GPUs.
    gpus_are_real: bool = True
    gpu_model: str | None = None
    cpus_per_task: int | None = None
    mem_gb: int | None = None
    shared_fs: str | None = None
    ib_hcas: int = 0
    ib_rate_gbps: float = 400.0
    ib_link_layer: str = "InfiniBand"
    device_cgroups: bool = True
    accounting: bool = True  # false: the cluster runs without slurmdbd (sacct is not judged)
    min_driver: str | None = None
    min_cuda: str | None = None
    expect_kernel: str | None = None  # every node must run exactly this kernel (uname -r)
    expect_memory_gib: float | None = None  # host RAM per node; judged by inventory.memory_spread
    dcgm_level: int = 1
    dcgm_required: bool = False  # true: a node without dcgmi fails; false: DCGM is not applicable there
    # true: the slow burn checks belong to the required set (a run without them is PARTIAL)
    require_slow: bool = False
    job_timeout_min: int = 30
    queue_timeout_s: int = 300
    slurm_conf: str | None = None
    sbatch_extra: Mapping[str, str] = field(default_factory=dict)
    env: Mapping[str, str] = field(default_factory=dict)
    thresholds: str | None = None
    nccl: NcclSettings = field(default_factory=NcclSettings)
    training: TrainingSettings = field(default_factory=TrainingSettings)
    compute: ComputeSettings = field(default_factory=ComputeSettings)


# --------------------------------------------------------------------------- lines derived from the fabric

# Collectives whose across-node busbw the network bounds, and how: Ring-bound ones at the node's
# network bandwidth; alltoall at what uniform traffic lets through it.
DERIVED_OPS = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "alltoall")
NCCL_ALGOS = ("Ring", "Tree", "CollNetDirect", "CollNetChain", "NVLS", "NVLSTree", "PAT")


def node_network_gbps(profile: Profile) -> float | None:
    """The fabric's line rate per node in GB/s (``ib_hcas × ib_rate_gbps / 8``), or None where
    nothing crosses a network: no HCAs, or a single node."""
    if profile.ib_hcas < 1 or profile.nodes < 2:
        return None
    return profile.ib_hcas * profile.ib_rate_gbps / 8


def network_busbw(op: str, per_node_gbps: float, nodes: int, gpus_per_node: int) -> tuple[float, str]:
    """The busbw ``op`` reaches across ``nodes`` when the network runs at line rate, and the
    arithmetic as a phrase.

    On Ring, every channel crosses each node boundary on one NIC and carries busbw's share of the
    data, so all_reduce, all_gather, reduce_scatter and broadcast read at most the node's network
    bandwidth, whatever the node count. alltoall sends the fraction ``(nodes−1)/nodes`` of every
    rank's buffer off its node: busbw ≤ per-GPU share × nodes/(nodes−1) × (n−1)/n over n ranks.
    """
    if op != "alltoall":
        return per_node_gbps, " (the Ring bound)"
    n = nodes * gpus_per_node
    bound = per_node_gbps / gpus_per_node * nodes / (nodes - 1) * (n - 1) / n
    return bound, (f"; alltoall over {nodes} × {gpus_per_node} GPUs: {per_node_gbps:g}/{gpus_per_node} × "
                   f"{nodes}/{nodes - 1} × {n - 1}/{n} = {bound:.4g} GB/s")  # fmt: skip


def derived_inter_node(profile: Profile) -> dict[str, Threshold]:
    """``nccl.<op>.inter_node`` lines from the profile's fabric: the network bound of each
    collective times ``[nccl] inter_node_fail_fraction`` and ``inter_node_warn_fraction``. Empty
    where nothing crosses a network (``node_network_gbps`` is None)."""
    per_node = node_network_gbps(profile)
    if per_node is None:
        return {}
    s = profile.nccl
    out: dict[str, Threshold] = {}
    for op in DERIVED_OPS:
        if op == "alltoall" and not profile.gpus_per_node:
            continue  # its bound needs the GPUs per node
        bound, how = network_busbw(op, per_node, profile.nodes, profile.gpus_per_node or 1)
        fail, warn = bound * s.inter_node_fail_fraction, bound * s.inter_node_warn_fraction
        source = (f"derived: {profile.ib_hcas} × {profile.ib_rate_gbps:g} Gb/s = {per_node:g} GB/s per node"
                  f"{how}; fail × {s.inter_node_fail_fraction:g} = {fail:.4g}, warn × "
                  f"{s.inter_node_warn_fraction:g} = {warn:.4g} GB/s ([profiles.{profile.name}] ib_hcas, "
                  "ib_rate_gbps, nccl.inter_node_*_fraction)")  # fmt: skip
        metric = f"nccl.{op}.inter_node"
        out[metric] = Threshold(metric=metric, unit="GB/s", fail_below=round(fail, 3), warn_below=round(warn, 3),
                                source=source)  # fmt: skip
    return out


@dataclass(frozen=True)
class Config:
    """Everything thresholds.toml says."""

    path: Path
    profiles: Mapping[str, Profile]
    threshold_sets: Mapping[str, Mapping[str, Threshold]]
    matches: Mapping[str, tuple[str, ...]]

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

    def thresholds_for(self, profile: Profile, gpu_model: str | None = None) -> ThresholdSet:
        """The set that applies to ``profile``: named explicitly, else matched on the GPU model
        (``gpu_model`` if given, e.g. what NVML reports, else the profile's), laid over default;
        the across-node busbw lines it does not set are derived from the profile's fabric."""
        name = profile.thresholds
        model = (gpu_model or profile.gpu_model or "").lower()
        if name is None and model:
            for set_name, fragments in self.matches.items():
                if any(fragment.lower() in model for fragment in fragments):
                    name = set_name
                    break
        name = name or "default"
        merged = dict(self.threshold_sets.get("default", {}))
        merged.update(self.threshold_sets.get(name, {}))
        # A line the file sets wins; the fabric fills in the across-node lines it leaves out.
        for metric, derived in derived_inter_node(profile).items():
            merged.setdefault(metric, derived)
        return ThresholdSet(name=name, values=types.MappingProxyType(merged), file=str(self.path))


# --------------------------------------------------------------------------- generic table → dataclass


def _reject_unknown(table: Mapping[str, Any], known: typing.Iterable[str], where: str, file: str) -> None:
    known = list(known)
    for key in table:
        if key not in known:
            guess = difflib.get_close_matches(key, known, n=1)
            hint = f" Perhaps you meant '{guess[0]}'?" if guess else f" Known keys: {', '.join(known)}."
            raise ConfigError(f"{file}: {where}.{key}: unknown key.{hint}")


def _describe(tp: Any) -> str:
    names = {int: "an integer", float: "a number", str: "a string", bool: "true or false"}
    if tp in names:
        return names[tp]
    origin = typing.get_origin(tp)
    if origin in (tuple, list):
        return "a list of strings"
    if origin is Literal:
        return " or ".join(repr(a) for a in typing.get_args(tp))
    if origin in (Mapping, dict):
        return "a table of strings"
    return str(tp)


def _convert(tp: Any, value: Any, where: str, file: str) -> Any:
    origin = typing.get_origin(tp)
    if origin is Annotated:
        if "bytes" in tp.__metadata__ and isinstance(value, int | str):
            return parse_bytes(value, f"{file}: {where}")
        return _convert(typing.get_args(tp)[0], value, where, file)
    if origin in (types.UnionType, typing.Union):
        options = [a for a in typing.get_args(tp) if a is not type(None)]
        errors = []
        for option in options:
            try:
                return _convert(option, value, where, file)
            except ConfigError as exc:
                errors.append(_describe(option))
                last = exc
        if len(options) == 1:
            raise last
        raise ConfigError(f"{file}: {where}: expected {' or '.join(errors)}, got {value!r}.")
    if origin is Literal:
        if value not in typing.get_args(tp):
            raise ConfigError(f"{file}: {where}: expected {_describe(tp)}, got {value!r}.")
        return value
    if origin in (tuple, list):
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ConfigError(f"{file}: {where}: expected a list of strings, got {value!r}.")
        return tuple(value)
    if origin in (Mapping, dict):
        if not isinstance(value, dict) or not all(isinstance(v, str | int | float) for v in value.values()):
            raise ConfigError(f"{file}: {where}: expected a table of strings, got {value!r}.")
        return types.MappingProxyType({k: str(v) for k, v in value.items()})
    if is_dataclass(tp):
        if not isinstance(value, dict):
            raise ConfigError(f"{file}: {where}: expected a table, got {value!r}.")
        return _build(tp, value, where, file)
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            raise ConfigError(f"{file}: {where}: expected a finite number, got {value!r}.")
        return float(value)
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{file}: {where}: expected an integer, got {value!r}.")
        return value
    if tp is bool or tp is str:
        if not isinstance(value, tp):
            raise ConfigError(f"{file}: {where}: expected {_describe(tp)}, got {value!r}.")
        return value
    raise TypeError(f"unsupported field type {tp!r}")  # a bug in this module, not in the file


def _build(cls: Any, table: Mapping[str, Any], where: str, file: str, **given: Any) -> Any:
    hints = typing.get_type_hints(cls, include_extras=True)
    names = [f.name for f in fields(cls) if f.name not in given]
    _reject_unknown(table, names, where, file)
    kwargs = dict(given)
    for f in fields(cls):
        if f.name in table:
            kwargs[f.name] = _convert(hints[f.name], table[f.name], f"{where}.{f.name}", file)
        elif f.name not in given and f.default is MISSING and f.default_factory is MISSING:
            raise ConfigError(f"{file}: {where}: missing key {f.name!r}.")
    return cls(**kwargs)


# --------------------------------------------------------------------------- checks across keys


def _check_profile(p: Profile, where: str, file: str) -> None:
    def bad(key: str, why: str) -> ConfigError:
        return ConfigError(f"{file}: {where}.{key}: {why}")

    for key in ("partition", "account"):
        value = getattr(p, key)
        if value is not None and not _SLURM_NAME.match(value):
            raise bad(key, f"{value!r} is not a Slurm name (letters, digits, '_', '.', '-' only).")
    for node in p.nodelist:
        if not _SLURM_NODELIST.match(node):
            raise bad("nodelist", f"{node!r} is not a Slurm node name.")
    for key, value in p.sbatch_extra.items():
        if not _SBATCH_OPTION.match(key) or "\n" in value:
            raise bad(f"sbatch_extra.{key}", "expected a long sbatch option name and a one-line value.")
    for key, value in p.env.items():
        if not _ENV_NAME.match(key) or "\n" in value or "\0" in value:
            raise bad(f"env.{key}", "expected an environment variable name and a one-line value.")
    positive = {"nodes": p.nodes, "job_timeout_min": p.job_timeout_min, "queue_timeout_s": p.queue_timeout_s}
    for key, number in positive.items():
        if number < 1:
            raise bad(key, f"must be at least 1, got {number}.")
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
    for op in n.ops:
        if not any(m.startswith(f"nccl.{op}.") for m in METRICS):
            known = sorted({m.split(".")[1] for m in METRICS if m.startswith("nccl.")})
            raise bad("nccl.ops", f"unknown collective {op!r}; known: {', '.join(known)}.")
    if n.iters < 1 or n.warmup_iters < 0 or n.retries < 0 or n.timeout_s < 1:
        raise bad("nccl", "iters ≥ 1, warmup_iters ≥ 0, retries ≥ 0 and timeout_s ≥ 1 are required.")
    for key in ("inter_node_fail_fraction", "inter_node_warn_fraction"):
        fraction = getattr(n, key)
        if not 0 < fraction <= 1:
            raise bad(f"nccl.{key}", f"a fraction of the fabric's line rate, 0 < f ≤ 1; got {fraction:g}.")
    if n.inter_node_warn_fraction < n.inter_node_fail_fraction:
        raise bad("nccl.inter_node_warn_fraction",
                  f"{n.inter_node_warn_fraction:g} is under inter_node_fail_fraction "
                  f"({n.inter_node_fail_fraction:g}); the warn line must sit between pass and fail.")  # fmt: skip
    _check_algo(n.inter_node_algo, lambda why: bad("nccl.inter_node_algo", why))
    t = p.training
    sizes = ("d_model", "n_layers", "n_heads", "seq_len", "vocab", "micro_batch", "grad_accum", "steps", "timeout_s")
    for key in sizes:
        if getattr(t, key) < 1:
            raise bad(f"training.{key}", f"must be at least 1, got {getattr(t, key)}.")
    if t.warmup_steps < 0:
        raise bad("training.warmup_steps", f"must be 0 or more, got {t.warmup_steps}.")


def _check_algo(value: str, bad: typing.Callable[[str], ConfigError]) -> None:
    """``auto`` or an NCCL_ALGO list (``Ring``, ``Tree,Ring``, ``^NVLS``): NCCL's algorithm names."""
    if value == "auto":
        return
    known = {a.lower(): a for a in NCCL_ALGOS}
    names = value.removeprefix("^").split(",")
    for name in names:
        if name.strip().lower() not in known:
            guess = difflib.get_close_matches(name.strip(), [*NCCL_ALGOS, "auto"], n=1)
            hint = f" Perhaps you meant '{guess[0]}'?" if guess else ""
            raise bad(f"{name.strip()!r} is not an NCCL algorithm; write \"auto\" or a list of "
                      f"{', '.join(NCCL_ALGOS)} (\"^\" first excludes them).{hint}")  # fmt: skip


def _resolve_extends(raw: Mapping[str, Any], file: str) -> dict[str, dict[str, Any]]:
    """``extends = "other"`` copies the other profile's keys (nested tables merged one level)."""
    out: dict[str, dict[str, Any]] = {}

    def resolve(name: str, chain: tuple[str, ...]) -> dict[str, Any]:
        if name in out:
            return out[name]
        table = raw[name]
        if not isinstance(table, dict):
            raise ConfigError(f"{file}: profiles.{name}: expected a table.")
        parent_name = table.get("extends")
        merged: dict[str, Any] = {}
        if parent_name is not None:
            if parent_name not in raw:
                raise ConfigError(
                    f"{file}: profiles.{name}.extends: no profile {parent_name!r}; "
                    f"profiles are: {', '.join(sorted(raw))}."
                )
            if parent_name in chain:
                raise ConfigError(f"{file}: profiles.{name}.extends: loop through {' → '.join(chain)}.")
            for key, value in resolve(parent_name, (*chain, name)).items():
                merged[key] = dict(value) if isinstance(value, dict) else value
        for key, value in table.items():
            if key == "extends":
                continue
            if isinstance(value, dict) and isinstance(merged.get(key), dict) and key not in ("env", "sbatch_extra"):
                merged[key].update(value)
            else:
                merged[key] = value
        out[name] = merged
        return merged

    for name in raw:
        resolve(name, ())
    return out


def load(path: Path) -> Config:
    """Read and check ``path``; raises ConfigError naming file, key and fix."""
    file = str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{file}: no such file. Pass --thresholds=PATH or create it.") from None
    except OSError as exc:
        raise ConfigError(f"{file}: cannot be read ({exc.strerror}).") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{file}: not valid TOML: {exc}.") from None
    _reject_unknown(data, ("profiles", "thresholds"), "(top level)", file)

    raw_profiles = data.get("profiles", {})
    if not raw_profiles:
        raise ConfigError(f"{file}: no [profiles.NAME] table; define at least one profile.")
    profiles: dict[str, Profile] = {}
    for name, table in _resolve_extends(raw_profiles, file).items():
        where = f"profiles.{name}"
        profile = _build(Profile, table, where, file, name=name)
        _check_profile(profile, where, file)
        profiles[name] = profile

    sets: dict[str, dict[str, Threshold]] = {}
    matches: dict[str, tuple[str, ...]] = {}
    parents: dict[str, str] = {}
    for set_name, table in data.get("thresholds", {}).items():
        where = f"thresholds.{set_name}"
        if not isinstance(table, dict):
            raise ConfigError(f"{file}: {where}: expected a table.")
        table = dict(table)
        match = table.pop("match", [])
        if not isinstance(match, list) or not all(isinstance(m, str) and m for m in match):
            raise ConfigError(f"{file}: {where}.match: expected a list of GPU model name fragments.")
        parent = table.pop("extends", None)
        if parent is not None:
            if not isinstance(parent, str):
                raise ConfigError(f"{file}: {where}.extends: expected the name of another set.")
            parents[set_name] = parent
        matches[set_name] = tuple(match)
        values: dict[str, Threshold] = {}
        _flatten_thresholds(table, "", where, file, values)
        sets[set_name] = values
    resolved: dict[str, Mapping[str, Threshold]] = {}

    def resolve(name: str, chain: tuple[str, ...]) -> Mapping[str, Threshold]:
        if name not in resolved:
            merged: dict[str, Threshold] = {}
            parent = parents.get(name)
            if parent is not None:
                if parent not in sets:
                    raise ConfigError(
                        f"{file}: thresholds.{name}.extends: no set {parent!r}; sets are: {', '.join(sorted(sets))}."
                    )
                if parent in chain:
                    raise ConfigError(f"{file}: thresholds.{name}.extends: loop through {' → '.join(chain)}.")
                merged.update(resolve(parent, (*chain, name)))
            merged.update(sets[name])
            resolved[name] = types.MappingProxyType(merged)
        return resolved[name]

    for set_name in sets:
        resolve(set_name, ())
    for name, profile in profiles.items():
        if profile.thresholds is not None and profile.thresholds not in sets:
            raise ConfigError(
                f"{file}: profiles.{name}.thresholds: no set [thresholds.{profile.thresholds}]; "
                f"sets are: {', '.join(sorted(sets)) or '(none)'}."
            )
    return Config(path=path, profiles=types.MappingProxyType(profiles),
                  threshold_sets=types.MappingProxyType(resolved), matches=types.MappingProxyType(matches))  # fmt: skip

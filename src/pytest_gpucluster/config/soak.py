"""The soak's settings and rules.

``[profiles.NAME.soak]`` (``SoakSettings``): a default duration (``duration = "8h"``), whether the
profile's acceptance requires a soak (``required = true``), and the cycle's work (the node-side
``SoakConfig``'s keys). ``--gpucluster-soak=DURATION`` sets the duration for one run.

``[soak.rules.NAME]`` (``SoakRules``): how each GPU is judged cycle by cycle, every rule with the
``source`` its numbers rest on (docs/thresholds.md); a profile's ``[profiles.NAME.soak.rules.RULE]``
changes a rule's keys for its cluster. ``[soak.cpu_rules.NAME]`` holds only the keys that differ
where CPU ranks stand in for GPUs, laid over the GPU rules (a rule it does not name is the GPU
rule), and a profile's ``[profiles.NAME.soak.cpu_rules.RULE]`` over those. The rules are data in
thresholds.toml; a run that asks for a soak under a file without them is refused before any job,
naming the table.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import Annotated, Any

from pytest_gpucluster.workloads.nvml_util import THROTTLE_BITS
from pytest_gpucluster.workloads.soak import TINY, SoakConfig

# What a cycle measures per GPU, as the rules name it.
CYCLE_METRICS = ("tflops", "copy_tbps", "busbw_gbps")

_DURATION = re.compile(r"(\d+(?:\.\d+)?)\s*(d|h|min|m|s)", re.IGNORECASE)
_SECONDS = {"d": 86400.0, "h": 3600.0, "m": 60.0, "min": 60.0, "s": 1.0}


def parse_duration(text: str) -> float:
    """``"30m"``, ``"8h"``, ``"1h30m"``, ``"90s"``, ``"2d"`` or a plain number of seconds → seconds.
    ``"0"`` is no soak. ValueError saying how to write it otherwise."""
    value = text.strip().lower()
    if re.fullmatch(r"\d+(?:\.\d+)?", value):
        return float(value)
    parts = _DURATION.findall(value)
    if not parts or _DURATION.sub("", value).strip():
        raise ValueError(f"{text!r} is not a duration; write e.g. 30m, 8h, 1h30m or 90s")
    return sum(float(number) * _SECONDS[unit] for number, unit in parts)


def say_duration(seconds: float) -> str:
    """``3723`` → ``1 h 2 min``; under a minute in seconds."""
    if seconds < 60:
        return f"{seconds:.0f} s"
    minutes = int(seconds // 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes} min" if hours else f"{minutes} min"


@dataclass(frozen=True)
class SoakSettings:
    """``[profiles.NAME.soak]``: the soak's default duration, whether it is required, and the
    cycle's work on the nodes (the node-side ``SoakConfig``; CPU stand-ins take its ``TINY`` sizes
    where the table sets none)."""

    duration: str = "0"
    required: bool = False
    fail_fast: bool = False  # the first failing node ends every node's soak
    cycle_s: float | None = None
    sdc_every: int | None = None
    matmul_n: int | None = None
    copy_bytes: Annotated[int, "bytes"] | None = None
    collective_bytes: Annotated[int, "bytes"] | None = None

    def __post_init__(self) -> None:
        try:
            seconds = parse_duration(self.duration)
        except ValueError as exc:
            raise ValueError(f"duration: {exc}") from None
        if seconds < 0 or not math.isfinite(seconds):
            raise ValueError(f"duration {self.duration!r} must be 0 (no soak) or more")
        SoakConfig(**self.config_keys())  # the values' own checks

    @property
    def duration_s(self) -> float:
        return parse_duration(self.duration)

    def config_keys(self) -> dict[str, Any]:
        """The node-side keys this table sets."""
        names = [f.name for f in fields(SoakConfig)]
        return {k: v for k in names if (v := getattr(self, k, None)) is not None}

    def config(self, *, real_gpus: bool) -> SoakConfig:
        """The cycle's work: this table's keys over the GPU-sized defaults, or over ``TINY`` where
        CPU ranks stand in for GPUs."""
        base = SoakConfig() if real_gpus else TINY
        return SoakConfig(**{**{f.name: getattr(base, f.name) for f in fields(SoakConfig)}, **self.config_keys()})


def _check_fraction(key: str, value: float) -> None:
    if not 0 < value < 1:
        raise ValueError(f"{key} = {value}: a fraction between 0 and 1 (0.1 is 10 %)")


def _check_common(cycles: int, metrics: tuple[str, ...]) -> None:
    if cycles < 1:
        raise ValueError(f"cycles = {cycles}: at least 1")
    unknown = [m for m in metrics if m not in CYCLE_METRICS]
    if unknown or not metrics:
        raise ValueError(f"metrics {list(metrics)}: name what a cycle measures ({', '.join(CYCLE_METRICS)})")


@dataclass(frozen=True)
class BehindNodeBest:
    """A GPU below its node's best GPU of the same cycle by more than ``tolerance`` (a fraction),
    in ``cycles`` cycles in a row (one slow cycle is noise, not a sick GPU)."""

    tolerance: float
    cycles: int
    metrics: tuple[str, ...] = ("tflops",)
    source: str = ""

    def __post_init__(self) -> None:
        _check_fraction("tolerance", self.tolerance)
        _check_common(self.cycles, self.metrics)


@dataclass(frozen=True)
class Drift:
    """A GPU below its own early cycles (the median of cycles 1 … ``early_cycles``; cycle 0 warms
    up) by more than ``warn`` / ``fail`` (fractions), in ``cycles`` cycles in a row."""

    warn: float
    fail: float
    early_cycles: int
    cycles: int
    metrics: tuple[str, ...] = ("tflops", "copy_tbps", "busbw_gbps")
    source: str = ""

    def __post_init__(self) -> None:
        _check_fraction("warn", self.warn)
        _check_fraction("fail", self.fail)
        if self.warn > self.fail:
            raise ValueError(f"warn = {self.warn} is past fail = {self.fail}; warn must be the smaller drop")
        if self.early_cycles < 1:
            raise ValueError(f"early_cycles = {self.early_cycles}: at least 1")
        _check_common(self.cycles, self.metrics)


@dataclass(frozen=True)
class Dip:
    """A GPU below its own level (the median of its cycles after cycle 0) by more than ``warn`` (a
    fraction) for fewer cycles in a row than the drift rule needs to fail, and back: a warning
    naming the depth and the recovery, never a failure (a longer fall is the drift rule's)."""

    warn: float
    metrics: tuple[str, ...] = CYCLE_METRICS
    source: str = ""

    def __post_init__(self) -> None:
        _check_fraction("warn", self.warn)
        _check_common(1, self.metrics)


@dataclass(frozen=True)
class ThrottleRate:
    """Clock-event ``reasons`` (NVML's names), each reading (one a second) with one set counted
    as an event, per minute of any window of ``window_min`` minutes: at ``fail_per_min`` or more
    the GPU fails, at ``warn_per_min`` it warns."""

    reasons: tuple[str, ...]
    fail_per_min: float
    window_min: float
    warn_per_min: float | None = None
    source: str = ""

    def __post_init__(self) -> None:
        known = set(THROTTLE_BITS.values())
        unknown = [r for r in self.reasons if r not in known]
        if unknown or not self.reasons:
            raise ValueError(
                f"reasons {list(self.reasons)}: name NVML's clock-event reasons ({', '.join(sorted(known))})"
            )
        if self.fail_per_min <= 0 or self.window_min <= 0 or (self.warn_per_min is not None and self.warn_per_min <= 0):
            raise ValueError("fail_per_min, warn_per_min and window_min must be above 0")


@dataclass(frozen=True)
class MemoryErrors:
    """Any new uncorrectable ECC error since the soak began, any pending or failed row remap and
    any page pending retirement fail the GPU."""

    source: str = ""


# The rules of a soak, as [soak.rules] names them (``SoakRules``' fields of the same names).
RULE_NAMES = ("behind_node_best", "drift", "hw_slowdown", "thermal", "power_brake", "memory_errors", "dip")


@dataclass(frozen=True)
class SoakRules:
    """``[soak.rules]``: every rule a soak judges by (None: the file has no such table). Xid
    events, fabric counters and temperatures are judged by the suite's existing rules (the Xid
    classes, the profile's fabric families, ``gpu.temperature`` of the threshold set); an SDC
    digest that differs from its model's majority fails. A recovered dip only warns.

    ``tables`` names, per rule, the tables its keys were read from, the one that wins first
    (``("profiles.ci.soak.rules.drift", "soak.cpu_rules.drift", "soak.rules.drift")``); a rule it
    does not name is ``[soak.rules.RULE]``'s alone. ``path`` is the file that holds them."""

    behind_node_best: BehindNodeBest | None = None
    drift: Drift | None = None
    hw_slowdown: ThrottleRate | None = None
    thermal: ThrottleRate | None = None
    power_brake: ThrottleRate | None = None
    memory_errors: MemoryErrors | None = None
    dip: Dip | None = None  # optional: a file without it names no recovered dips
    tables: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    path: str = ""

    def missing(self) -> list[str]:
        """The rule tables the file lacks (``dip`` is optional)."""
        return [f"[soak.rules.{name}]" for name in RULE_NAMES if name != "dip" and getattr(self, name) is None]

    def tables_of(self, name: str) -> tuple[str, ...]:
        """The tables rule ``name``'s keys were read from, the one that wins first."""
        return self.tables.get(name) or (f"soak.rules.{name}",)

    def where(self, name: str) -> str:
        """``[soak.cpu_rules.drift] over [soak.rules.drift]``: where rule ``name`` is set."""
        return " over ".join(f"[{t}]" for t in self.tables_of(name))

    def threshold(self, name: str) -> dict[str, Any]:
        """What a finding of rule ``name`` was judged by, as the results keep it: the rule's keys,
        ``source`` (the file and the tables, ``where``) and ``evidence`` (the rule's own
        ``source``: what its numbers rest on)."""
        rule = getattr(self, name)
        keys = {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(rule).items() if v is not None}
        evidence = keys.pop("source", "")
        file = f"{self.path} " if self.path else ""
        return {**keys, "source": f"{file}{self.where(name)}", **({"evidence": evidence} if evidence else {})}

    def for_cpu_ranks(self) -> str:
        """How these rules judge CPU ranks standing in, in words: ``[soak.cpu_rules] over
        [soak.rules]``, or, where no rule names a CPU table, the GPU rules."""
        if any("cpu_rules." in table for name in RULE_NAMES for table in self.tables_of(name)):
            return "[soak.cpu_rules] over [soak.rules]"
        return "the GPU rules ([soak.rules]): the file has no [soak.cpu_rules]"

    def to_json(self) -> dict[str, Any]:
        """The rules as the results' ``soak`` section keeps them: each rule's keys and the tables
        they were read from (None: not in force)."""
        out: dict[str, Any] = {}
        for name in RULE_NAMES:
            rule = getattr(self, name)
            out[name] = {**asdict(rule), "tables": list(self.tables_of(name))} if rule is not None else None
        return out

"""``[thresholds.SET]`` tables read into ``Threshold`` sets: each set's lines with its ``extends``
chain laid under it, its ``match`` fragments and the node shape its intra-node lines were measured
on. Every error names the file and the dotted key (``load.load`` calls it once per file).
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import types
from collections.abc import Mapping
from typing import Any

from pytest_gpucluster.config.metrics import Metric
from pytest_gpucluster.config.tables import reject_unknown, resolve_extends
from pytest_gpucluster.config.thresholds import Threshold
from pytest_gpucluster.errors import ConfigError


def threshold_sets(
    raw: Mapping[str, Any], file: str, catalogue: Mapping[str, Metric]
) -> tuple[dict[str, Mapping[str, Threshold]], dict[str, tuple[str, ...]], dict[str, int | None]]:
    """Every ``[thresholds.SET]`` as metric → Threshold with its ``extends`` chain laid under it,
    each set's ``match`` fragments, and the GPUs per node its lines were measured on
    (``gpus_per_node``, inherited along ``extends``; None where no set of the chain says)."""
    sets: dict[str, Mapping[str, Threshold]] = {}
    matches: dict[str, tuple[str, ...]] = {}
    own_shape: dict[str, int] = {}
    parents: dict[str, str] = {}
    for set_name, table in raw.items():
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
        shape = table.pop("gpus_per_node", None)
        if shape is not None:
            if isinstance(shape, bool) or not isinstance(shape, int) or shape < 1:
                raise ConfigError(
                    f"{file}: {where}.gpus_per_node: expected the number of GPUs per node the set's lines "
                    f"were measured on (a whole number ≥ 1), got {shape!r}."
                )
            own_shape[set_name] = shape
        matches[set_name] = tuple(match)
        values: dict[str, Threshold] = {}
        _flatten_thresholds(table, "", where, file, values, catalogue)
        sets[set_name] = {metric: dataclasses.replace(t, defined_in=set_name) for metric, t in values.items()}

    def merge(parent: Mapping[str, Threshold], own: Mapping[str, Threshold]) -> Mapping[str, Threshold]:
        return {**parent, **own}

    resolved = resolve_extends(sets, parents.get, merge, "thresholds", "set", file)

    def shape_of(name: str) -> int | None:
        seen: set[str] = set()
        while name not in own_shape and name in parents and name not in seen:
            seen.add(name)
            name = parents[name]
        return own_shape.get(name)

    shapes = {name: shape_of(name) for name in sets}
    return {name: types.MappingProxyType(dict(values)) for name, values in resolved.items()}, matches, shapes


def _flatten_thresholds(
    table: Mapping[str, Any],
    prefix: str,
    where: str,
    file: str,
    out: dict[str, Threshold],
    catalogue: Mapping[str, Metric],
) -> None:
    for key, value in table.items():
        name = f"{prefix}.{key}" if prefix else key
        here = f"{where}.{key}"
        if not isinstance(value, dict):
            raise ConfigError(f"{file}: {here}: expected a table of bounds (unit, fail_below, ...), got {value!r}.")
        if name in catalogue:
            out[name] = _threshold(catalogue[name], value, here, file)
        elif any(m.startswith(name + ".") for m in catalogue):
            _flatten_thresholds(value, name, here, file, out, catalogue)
        else:
            guess = difflib.get_close_matches(name, list(catalogue), n=1)
            hint = f" Perhaps you meant '{guess[0]}'?" if guess else ""
            raise ConfigError(f"{file}: {here}: {name!r} is not a known metric.{hint}")


_THRESHOLD_KEYS = ("unit", "fail_below", "warn_below", "fail_above", "warn_above", "xfail", "source", "path_only")


def _threshold(spec: Metric, table: Mapping[str, Any], where: str, file: str) -> Threshold:
    metric = spec.name
    reject_unknown(table, _THRESHOLD_KEYS, where, file)
    unit = table.get("unit")
    if unit is None:
        raise ConfigError(f'{file}: {where}: missing unit; write unit = "{spec.unit}".')
    if unit != spec.unit:
        raise ConfigError(f'{file}: {where}.unit: {unit!r} is not the unit of {metric}; write unit = "{spec.unit}".')
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
            raise ConfigError(f"{file}: {where}.{key}: {metric} is better when {good}; use {right} instead.")
    if not bounds:
        raise ConfigError(
            f"{file}: {where}: no bound given; set "
            + (
                "fail_below (and optionally warn_below)."
                if spec.better == "higher"
                else "fail_above (and optionally warn_above)."
            )
        )
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
    evidence = table.get("source", "")
    if not isinstance(evidence, str) or ("source" in table and not evidence.strip()):
        raise ConfigError(
            f"{file}: {where}.source: expected where the bound comes from as text, e.g. "
            f'source = "nccl-tests #212: 8×H100 ring all_reduce 365 GB/s", got {evidence!r}.'
        )
    path_only = table.get("path_only", False)
    if not isinstance(path_only, bool):
        raise ConfigError(
            f"{file}: {where}.path_only: expected true (the line proves a path, not a speed) or false, "
            f"got {path_only!r}."
        )
    return Threshold(
        metric=metric,
        unit=unit,
        xfail=xfail,
        source=f"{file} [{where}]",
        evidence=evidence.strip(),
        path_only=path_only,
        fail_below=bounds.get("fail_below"),
        warn_below=bounds.get("warn_below"),
        fail_above=bounds.get("fail_above"),
        warn_above=bounds.get("warn_above"),
    )
